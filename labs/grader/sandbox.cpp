// labs/grader/sandbox.cpp — bubblewrap, rlimits, cgroups and the job's pipes (sandbox.hpp says what each guarantees).
//
// The order of a job's start, in the child between fork and exec: a session of its own, its
// pipes on 1, 2 and 3 and every other descriptor closed, the rlimits, the cgroups (root),
// the unprivileged user (root), a death signal should the grader die, then exec of bwrap
// (or of the command, without the sandbox). Inside bwrap, prlimit sets the process limit
// again: the kernel counts processes per user namespace, and the sandbox's is new.
#include "sandbox.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace grader::sandbox {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* bwrap_path = "/usr/bin/bwrap";
constexpr const char* prlimit_path = "/usr/bin/prlimit";

bool is_root() { return ::geteuid() == 0; }

// The processes of a user, from /proc: what RLIMIT_NPROC counts for a grader that is not root.
int processes_of(uid_t uid) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc", fs::directory_options::skip_permission_denied)) {
    struct stat st {};
    if (std::isdigit(static_cast<unsigned char>(e.path().filename().string()[0])) &&
        ::stat(e.path().c_str(), &st) == 0 && st.st_uid == uid)
      ++n;
  }
  return n;
}

// parent pid of every process, from /proc/<pid>/stat
std::map<pid_t, pid_t> parents() {
  std::map<pid_t, pid_t> ppid;
  for (const auto& e : fs::directory_iterator("/proc", fs::directory_options::skip_permission_denied)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const auto close = stat.rfind(')');  // the command may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t parent = 0;
    if (rest >> state >> parent) ppid[static_cast<pid_t>(std::stol(name))] = parent;
  }
  return ppid;
}

std::vector<pid_t> descendants_of(pid_t root) {
  const auto ppid = parents();
  std::set<pid_t> found{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [pid, parent] : ppid)
      if (found.contains(parent) && !found.contains(pid)) found.insert(pid), grew = true;
  }
  found.erase(root);
  return {found.begin(), found.end()};
}

// --- cgroups: the job's own pids and memory groups, when root can make them ---

struct Cgroups {
  std::vector<fs::path> dirs;  // one per controller, each holding the job

  static Cgroups make(const std::string& name, const Limits& limits) {
    Cgroups c;
    if (!is_root()) return c;
    auto make_in = [&](const fs::path& root, const std::vector<std::pair<std::string, std::string>>& settings) {
      if (!fs::exists(root / "cgroup.procs")) return;
      const fs::path dir = root / "mha-grade" / name;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) return;
      for (const auto& [file, value] : settings)
        if (fs::exists(dir / file)) std::ofstream(dir / file) << value;
      c.dirs.push_back(dir);
      c.procs.push_back((dir / "cgroup.procs").string());
    };
    if (fs::exists("/sys/fs/cgroup/pids/cgroup.procs") || fs::exists("/sys/fs/cgroup/memory/cgroup.procs")) {
      make_in("/sys/fs/cgroup/pids", {{"pids.max", std::to_string(limits.processes + 8)}});  // + bwrap's own
      if (limits.memory > 0)
        make_in("/sys/fs/cgroup/memory", {{"memory.limit_in_bytes", std::to_string(limits.memory)},
                                          {"memory.memsw.limit_in_bytes", std::to_string(limits.memory)}});
    }
    return c;
  }
  std::vector<std::string> procs;  // each group's cgroup.procs, made before fork

  // In the child, before exec: the job's first process joins (its children follow). No
  // allocation here: another thread of the grader may have held the allocator's lock at fork.
  void join() const {
    char pid[24];
    int n = 0;
    for (long p = ::getpid(); p > 0; p /= 10) pid[n++] = static_cast<char>('0' + p % 10);
    for (int i = 0; i < n / 2; ++i) std::swap(pid[i], pid[n - 1 - i]);
    for (const auto& file : procs) {
      const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0) {
        [[maybe_unused]] auto written = ::write(fd, pid, static_cast<std::size_t>(n));
        ::close(fd);
      }
    }
  }
  std::vector<pid_t> members() const {
    std::vector<pid_t> pids;
    for (const auto& d : dirs) {
      std::ifstream in(d / "cgroup.procs");
      for (pid_t p; in >> p;) pids.push_back(p);
    }
    return pids;
  }
  // Kill what is left, then remove the groups (a group with a process cannot be removed).
  void end() const {
    for (int round = 0; round < 50; ++round) {
      const auto left = members();
      if (left.empty()) break;
      for (pid_t p : left) ::kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (const auto& d : dirs) ::rmdir(d.c_str());
  }
};

// --- the command line ---

std::vector<std::string> bwrap_command(const Job& job, const Limits& limits) {
  std::vector<std::string> a{bwrap_path,
                             "--unshare-user",
                             "--unshare-ipc",
                             "--unshare-pid",
                             "--unshare-net",
                             "--unshare-uts",
                             "--unshare-cgroup-try",
                             "--disable-userns",
                             "--die-with-parent",
                             "--new-session",
                             "--uid",
                             "1000",
                             "--gid",
                             "1000",
                             "--hostname",
                             "sandbox"};
  auto add = [&](std::initializer_list<std::string> more) { a.insert(a.end(), more); };
  add({"--ro-bind", "/usr", "/usr"});
  // /bin, /lib, /lib64, /sbin: symlinks into /usr on a merged-/usr system, folders otherwise.
  for (const char* top : {"/bin", "/lib", "/lib64", "/lib32", "/sbin"}) {
    std::error_code ec;
    if (fs::is_symlink(top, ec)) add({"--symlink", fs::read_symlink(top).string(), top});
    else if (fs::is_directory(top, ec)) add({"--ro-bind", top, top});
  }
  // What the dynamic linker and the compiler's driver read from /etc.
  for (const char* etc : {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"})
    if (fs::exists(etc)) add({"--ro-bind", etc, etc});
  add({"--proc", "/proc", "--dev", "/dev", "--size", std::to_string(limits.tmp), "--tmpfs", "/tmp"});
  for (const auto& b : job.binds) add({b.writable ? "--bind" : "--ro-bind", b.outside.string(), b.inside.string()});
  add({"--chdir", job.cwd.string(), "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
       "--setenv", "LANG", "C.UTF-8"});
  const std::string n = std::to_string(limits.processes);
  add({"--", prlimit_path, "--nproc=" + n + ":" + n, "--"});
  a.insert(a.end(), job.argv.begin(), job.argv.end());
  return a;
}

void set_limit(int resource, rlim_t value) {
  const rlimit r{value, value};
  ::setrlimit(resource, &r);
}

// In the child: everything between fork and exec. Only async-signal-safe calls past this
// point's allocations (the arguments are built before fork).
[[noreturn]] void start_child(const Job& job, const Limits& limits, const Cgroups& cgroups, int out, int answers,
                              int report, std::vector<char*>& argv, std::vector<char*>& envp, rlim_t nproc,
                              uid_t user) {
  ::setsid();
  const int null = ::open("/dev/null", O_RDONLY);
  ::dup2(null, 0);
  ::dup2(out, 1);
  ::dup2(out, 2);
  if (answers >= 0) ::dup2(answers, 3);
  else ::close(3);
  // every other descriptor of the grader closed, but the report pipe (close-on-exec)
  for (int fd = answers >= 0 ? 4 : 3; fd < 1024; ++fd)
    if (fd != report) ::close(fd);
  set_limit(RLIMIT_CPU, static_cast<rlim_t>(limits.cpu_seconds));
  if (limits.memory > 0) set_limit(RLIMIT_AS, limits.memory);
  set_limit(RLIMIT_FSIZE, limits.file_size);
  set_limit(RLIMIT_CORE, 0);
  set_limit(RLIMIT_NPROC, nproc);
  cgroups.join();
  if (is_root()) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(user) != 0 || ::setuid(user) != 0) {
      const char* why = "cannot leave root for the job's own user";
      [[maybe_unused]] auto n = ::write(report, why, std::strlen(why));
      ::_exit(127);
    }
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Leaving root made the process undumpable, which also keeps a sanitizer's leak check from
  // tracing its own threads; the job's user is its own, so nothing else is opened by this.
  ::prctl(PR_SET_DUMPABLE, 1);
  if (job.isolation == Isolation::none && ::chdir(job.cwd.c_str()) != 0) {
    const char* why = "cannot enter the job's folder";
    [[maybe_unused]] auto n = ::write(report, why, std::strlen(why));
    ::_exit(127);
  }
  ::execve(argv[0], argv.data(), envp.data());
  const char* why = "cannot start ";
  [[maybe_unused]] auto n1 = ::write(report, why, std::strlen(why));
  [[maybe_unused]] auto n2 = ::write(report, argv[0], std::strlen(argv[0]));
  ::_exit(127);
}

// Reads what is there on a pipe: kept up to `limit`, the rest dropped. False at its end.
bool drain(int fd, std::string& kept, std::uint64_t limit, bool& dropped) {
  char buffer[65536];
  const ssize_t n = ::read(fd, buffer, sizeof buffer);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  const std::size_t room = kept.size() < limit ? static_cast<std::size_t>(limit - kept.size()) : 0;
  kept.append(buffer, std::min(room, static_cast<std::size_t>(n)));
  if (static_cast<std::size_t>(n) > room) dropped = true;
  return true;
}

// The jobs running now, by their first process: the grader's children that are not among
// them are what some job left behind (an orphan of a job without the PID namespace).
std::mutex& jobs_mutex() {
  static std::mutex m;
  return m;
}
std::set<pid_t>& live_jobs() {
  static std::set<pid_t> pids;
  return pids;
}

// After a job: every process it left killed and reaped. The grader is their subreaper
// (become_subreaper): what a job leaves behind becomes the grader's child, and a child that
// is no job is an orphan. (In the sandbox, the PID namespace has already ended them.)
void sweep_orphans() {
  const std::lock_guard lock(jobs_mutex());
  const pid_t self = ::getpid();
  for (int round = 0; round < 50; ++round) {
    std::vector<pid_t> left;
    for (const auto& [p, parent] : parents())
      if (parent == self && !live_jobs().contains(p)) left.push_back(p);
    if (left.empty()) break;
    for (pid_t p : left) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (pid_t p : left) ::waitpid(p, nullptr, WNOHANG);
  }
}

}  // namespace

// A slot's user: the first uid from 60000 up whose lock no other process holds, taken for
// the grader's lifetime, so that two graders on one machine never share a job's user (the
// process limit counts the processes of a user).
uid_t box_user(int slot) {
  static std::mutex m;
  static std::map<int, uid_t> taken;
  const std::lock_guard lock(m);
  if (const auto it = taken.find(slot); it != taken.end()) return it->second;
  const fs::path dir = fs::is_directory("/run/lock") ? fs::path("/run/lock") : fs::path("/tmp");
  for (uid_t u = 60000; u < 61000; ++u) {
    if (std::any_of(taken.begin(), taken.end(), [&](const auto& t) { return t.second == u; })) continue;
    const fs::path file = dir / ("mha-grade-user-" + std::to_string(u) + ".lock");
    const int fd = ::open(file.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return taken[slot] = u;  // the descriptor stays open: the lock held
    ::close(fd);
  }
  throw std::runtime_error("no free user for a job between 60000 and 60999 (each held by another grader)");
}

std::string unavailable() {
  if (!fs::exists(bwrap_path)) return "bubblewrap is not installed (/usr/bin/bwrap; Debian's package bubblewrap)";
  if (!fs::exists(prlimit_path)) return "prlimit is not installed (/usr/bin/prlimit; Debian's package util-linux)";
  Job probe;
  probe.argv = {"/usr/bin/true"};
  Limits limits;
  limits.wall_seconds = 20;
  const Outcome o = run(probe, limits);
  if (o.ok()) return {};
  std::string why = o.output.substr(0, 300);
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  return "bubblewrap cannot start a sandbox here (" + (why.empty() ? std::string("no message") : why) +
         "): it needs unprivileged user namespaces (sysctl user.max_user_namespaces > 0, and "
         "kernel.unprivileged_userns_clone = 1 where the kernel has it)";
}

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

void kill_descendants() {
  for (int round = 0; round < 50; ++round) {
    const auto left = descendants_of(::getpid());
    if (left.empty()) break;
    for (pid_t p : left) ::kill(p, SIGKILL);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {}
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Outcome run(const Job& job, const Limits& limits) {
  Outcome o;
  const auto start = Clock::now();
  // The arguments and the environment, built before fork.
  const std::vector<std::string> command =
      job.isolation == Isolation::bubblewrap ? bwrap_command(job, limits) : job.argv;
  const std::vector<std::string> environment{"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"};
  std::vector<std::string> env = environment;
  if (job.isolation == Isolation::none)  // the quick loop keeps the caller's (MHA_LAB_INJECT, ...)
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
  std::vector<char*> argv, envp;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // The process limit: as root, the job's own user counts its processes alone; otherwise the
  // grader's user counts all of its own, so the job gets what it has now plus the limit.
  const rlim_t nproc = is_root() ? static_cast<rlim_t>(limits.processes + 8)
                                 : static_cast<rlim_t>(processes_of(::getuid()) + limits.processes + 8);
  const uid_t user = is_root() ? box_user(job.slot) : ::getuid();  // resolved before fork
  static std::atomic<int> serial = 0;
  const Cgroups cgroups = Cgroups::make(std::to_string(::getpid()) + "-" + std::to_string(serial++), limits);

  int out[2], answers[2] = {-1, -1}, report[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0 ||
      (job.answers_channel && ::pipe2(answers, O_CLOEXEC) != 0)) {
    o.could_not_start = true;
    o.output = std::string("cannot make a pipe: ") + std::strerror(errno);
    return o;
  }
  // The caller is the subreaper of what the job leaves: bubblewrap's outer process can end a
  // moment before the PID namespace's first process, which then becomes the caller's child
  // and is reaped by sweep_orphans below, never handed to the caller's parent.
  become_subreaper();
  pid_t pid = -1;
  {
    // Registered as a job before any other thread can sweep orphans (sweep_orphans).
    const std::lock_guard lock(jobs_mutex());
    pid = ::fork();
    if (pid == 0) {
      // dup2 clears close-on-exec on 1, 2 and 3; the report pipe keeps it.
      start_child(job, limits, cgroups, out[1], answers[1], report[1], argv, envp, nproc, user);
    }
    if (pid > 0) live_jobs().insert(pid);
  }
  ::close(out[1]);
  ::close(report[1]);
  if (answers[1] >= 0) ::close(answers[1]);
  if (pid < 0) {
    o.could_not_start = true;
    o.output = std::string("cannot fork: ") + std::strerror(errno);
    ::close(out[0]), ::close(report[0]);
    if (answers[0] >= 0) ::close(answers[0]);
    cgroups.end();
    return o;
  }

  // Read both pipes until they end, the job ends, or its time is up.
  const auto deadline = start + std::chrono::seconds(limits.wall_seconds);
  bool out_open = true, answers_open = answers[0] >= 0, exited = false, term_sent = false;
  int status = 0;
  Clock::time_point exited_at{}, term_at{};
  bool answers_dropped = false;
  // One round of reading: what the pipes hold now, waiting at most `wait_ms` for it. False
  // when nothing came.
  auto read_round = [&](int wait_ms) {
    pollfd fds[2];
    nfds_t n = 0;
    if (out_open) fds[n++] = {out[0], POLLIN, 0};
    if (answers_open) fds[n++] = {answers[0], POLLIN, 0};
    if (n == 0 || ::poll(fds, n, wait_ms) <= 0) return false;
    for (nfds_t i = 0; i < n; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (fds[i].fd == out[0]) out_open = drain(out[0], o.output, limits.output, o.output_truncated);
      else {
        answers_open = drain(answers[0], o.answers, limits.answers, answers_dropped);
        if (answers_dropped) o.answers_too_large = true;
      }
    }
    return true;
  };
  while (true) {
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) exited = true, exited_at = Clock::now();
    const auto now = Clock::now();
    // The job is over when its first process has ended and its pipes are closed, or when
    // they have been quiet a moment since it ended (what still holds a pipe then is a
    // process it left behind); what they held is read first, however long the wait was.
    if (exited && !out_open && !answers_open) break;
    if (exited && now - exited_at > std::chrono::milliseconds(500)) {
      while (!o.answers_too_large && read_round(0)) {}
      break;
    }
    if (!term_sent && (now > deadline || o.answers_too_large)) {
      o.timed_out = now > deadline;
      ::kill(-pid, SIGTERM);
      for (pid_t p : descendants_of(pid)) ::kill(p, SIGTERM);
      for (pid_t p : cgroups.members()) ::kill(p, SIGTERM);
      term_sent = true, term_at = now;
    }
    if (term_sent && now - term_at > std::chrono::seconds(1)) {
      for (pid_t p : descendants_of(pid)) ::kill(p, SIGKILL);
      for (pid_t p : cgroups.members()) ::kill(p, SIGKILL);
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      if (!exited && ::waitpid(pid, &status, 0) == pid) exited = true, exited_at = Clock::now();
      break;
    }
    if (!out_open && !answers_open) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    else read_round(50);
  }
  // Nothing of the job outlives it: its group, what it forked, its cgroups.
  for (pid_t p : descendants_of(pid)) ::kill(p, SIGKILL);
  ::kill(-pid, SIGKILL);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  cgroups.end();
  {
    const std::lock_guard lock(jobs_mutex());
    live_jobs().erase(pid);
  }
  sweep_orphans();
  std::string why;
  bool more = false;
  drain(report[0], why, 4096, more);
  ::close(out[0]), ::close(report[0]);
  if (answers[0] >= 0) ::close(answers[0]);
  if (!why.empty()) o.could_not_start = true, o.output = why + "\n" + o.output;
  if (WIFEXITED(status)) o.exit_status = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
  // bwrap reports its command's death by a signal as exit status 128 + N
  if (job.isolation == Isolation::bubblewrap && o.exit_status > 128 && o.exit_status < 160)
    o.signal = o.exit_status - 128, o.exit_status = -1;
  o.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return o;
}

}  // namespace grader::sandbox
