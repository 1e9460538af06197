// labs/grader/sandbox.hpp — running a student's build or program where it can harm nothing: bubblewrap and limits.
//
// Every command that touches a submission (its compile, its link, its run) goes through
// run(). Under Isolation::bubblewrap it runs in Debian's bwrap: new user, PID, network, IPC,
// UTS and cgroup namespaces (no network at all, no process of the machine visible), a file
// system that is the system's /usr read-only, a private size-limited /tmp, and only the
// folders the job binds; nothing else of the machine, the project or the other submissions
// exists in it. When the grader runs as root, the job runs as an unprivileged user of its
// own (a uid from 60000 up that no other grader on the machine holds) before the sandbox
// starts. Around it, in every mode:
//   - limits: wall time (the grader's clock), CPU time, address space, processes, file size,
//     set as rlimits, and as the pids and memory cgroups of the job when root can make them;
//   - output: stdout and stderr through a pipe, the first `output` bytes kept, the rest
//     read and dropped (Outcome says so); the answers' stream (file descriptor 3) likewise,
//     but a stream over its limit stops the job, as an answer that large is no answer;
//   - an end: SIGTERM at the wall-time limit, SIGKILL a second later, and every process the
//     job left (the PID namespace's, the cgroup's, the grader's orphans) killed before run()
//     returns.
// Isolation::none runs the command with the limits alone: the student's own quick loop,
// and `mha-grade gradebook --no-sandbox`, which a teacher asks for explicitly.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace grader::sandbox {

struct Limits {
  int wall_seconds = 60;                   // the job's time on the clock
  int cpu_seconds = 60;                    // CPU time of each process
  std::uint64_t memory = 2ull << 30;       // address space of each process; the cgroup's when root; 0: none
  int processes = 64;                      // processes and threads
  std::uint64_t output = 2ull << 20;       // stdout and stderr kept
  std::uint64_t answers = 64ull << 20;     // the answers' stream, at most
  std::uint64_t tmp = 64ull << 20;         // the private /tmp
  std::uint64_t file_size = 256ull << 20;  // any one file written
};

enum class Isolation { bubblewrap, none };

// A folder or file of the machine, seen at `inside` in the sandbox.
struct Bind {
  std::filesystem::path outside, inside;
  bool writable = false;
};

struct Job {
  std::vector<std::string> argv;  // argv[0] an absolute path, as the sandbox sees it
  std::vector<Bind> binds;
  std::filesystem::path cwd = "/tmp";
  bool answers_channel = false;  // give the job file descriptor 3, and read it
  Isolation isolation = Isolation::bubblewrap;
  int slot = 0;  // which of the parallel jobs: the user it runs as, when root
};

struct Outcome {
  int exit_status = -1;  // when it exited
  int signal = 0;        // when a signal ended it
  bool timed_out = false, output_truncated = false, answers_too_large = false, could_not_start = false;
  std::string output, answers;
  double seconds = 0;
  bool ok() const { return exit_status == 0 && !timed_out && !answers_too_large && !could_not_start; }
};

// Runs the job to its end within the limits; never throws for what the job does.
Outcome run(const Job& job, const Limits& limits);

// Empty when bubblewrap can start a sandbox here; otherwise what is missing, in words.
std::string unavailable();

// The user a job of `slot` runs as when the grader is root: one per slot and grader, held
// against other graders on the machine by a lock in /run/lock.
uid_t box_user(int slot);

// Make the caller the subreaper of what its jobs leave behind (run() does, before each job).
void become_subreaper();
// Kill and reap every process left below the caller: what a job's orphans became when the
// job ran without the sandbox's PID namespace.
void kill_descendants();

}  // namespace grader::sandbox
