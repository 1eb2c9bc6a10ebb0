#include "trex/or/eval/sandbox.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "trex/core/error.hpp"
#include "trex/core/process_pool.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib::eval {
namespace {

// ---------------------------------------------------------------- Landlock
// Declared here so that older kernel headers (Debian 12 has ABI 2) still
// build; the running kernel's ABI decides what is used.
constexpr long kSysLandlockCreateRuleset = 444;
constexpr long kSysLandlockAddRule = 445;
constexpr long kSysLandlockRestrictSelf = 446;
constexpr long kSysPidfdOpen = 434;
constexpr long kSysCloseRange = 436;
constexpr uint32_t kLandlockCreateRulesetVersion = 1u << 0;
constexpr int kLandlockRulePathBeneath = 1;

struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

struct __attribute__((packed)) LandlockPathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};

constexpr uint64_t kFsWriteFile = 1ull << 1;
constexpr uint64_t kFsWriteAbi1 = (1ull << 1) | (1ull << 4) | (1ull << 5) | (1ull << 6) |
                                  (1ull << 7) | (1ull << 8) | (1ull << 9) | (1ull << 10) |
                                  (1ull << 11) | (1ull << 12);
constexpr uint64_t kFsRefer = 1ull << 13;                                    // ABI 2
constexpr uint64_t kFsTruncate = 1ull << 14;                                 // ABI 3
constexpr uint64_t kNetBindConnectTcp = (1ull << 0) | (1ull << 1);           // ABI 4
constexpr uint64_t kScopeAbstractUnixAndSignal = (1ull << 0) | (1ull << 1);  // ABI 6

int landlock_abi() {
  long abi = syscall(kSysLandlockCreateRuleset, nullptr, 0, kLandlockCreateRulesetVersion);
  return abi > 0 ? static_cast<int>(abi) : 0;
}

uint64_t landlock_fs_rights(int abi) {
  uint64_t rights = kFsWriteAbi1;
  if (abi >= 2) rights |= kFsRefer;
  if (abi >= 3) rights |= kFsTruncate;
  return rights;
}

// In the child: confine writes to `dir_fd` (and /dev/null), deny TCP and
// cross-sandbox signals. Returns false on failure (errno set).
bool apply_landlock(int abi, int dir_fd, int devnull_path_fd) {
  if (abi <= 0) return true;
  LandlockRulesetAttr attr{};
  attr.handled_access_fs = landlock_fs_rights(abi);
  size_t size = sizeof(uint64_t);
  if (abi >= 4) {
    attr.handled_access_net = kNetBindConnectTcp;
    size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = kScopeAbstractUnixAndSignal;
    size = sizeof attr;
  }
  int ruleset = static_cast<int>(syscall(kSysLandlockCreateRuleset, &attr, size, 0));
  if (ruleset < 0) return false;
  LandlockPathBeneathAttr dir_rule{attr.handled_access_fs, dir_fd};
  if (syscall(kSysLandlockAddRule, ruleset, kLandlockRulePathBeneath, &dir_rule, 0) != 0)
    return false;
  if (devnull_path_fd >= 0) {
    LandlockPathBeneathAttr null_rule{kFsWriteFile | (abi >= 3 ? kFsTruncate : 0), devnull_path_fd};
    syscall(kSysLandlockAddRule, ruleset, kLandlockRulePathBeneath, &null_rule, 0);
  }
  if (syscall(kSysLandlockRestrictSelf, ruleset, 0) != 0) return false;
  ::close(ruleset);
  return true;
}

// Under AddressSanitizer a forked copy of the harness already maps terabytes
// of shadow memory, so an address-space limit would break it; in-process
// tasks then rely on the resident-memory watchdog alone.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kLimitAddressSpaceInChild = false;
#else
constexpr bool kLimitAddressSpaceInChild = true;
#endif

// ---------------------------------------------------------------- helpers
using Clock = std::chrono::steady_clock;
const Clock::time_point kEpoch = Clock::now();
double now_seconds() {
  return std::chrono::duration<double>(Clock::now() - kEpoch).count();
}

constexpr char kSetupMarker[] = "\x01trex-sandbox-setup:";

void write_fd(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

[[noreturn]] void child_fail(const char* what, int err) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "%s%s: %s", kSetupMarker, what, std::strerror(err));
  if (n > 0) write_fd(3, buf, static_cast<size_t>(std::min<int>(n, sizeof buf - 1)));
  n = std::snprintf(buf, sizeof buf, "trex sandbox: %s: %s\n", what, std::strerror(err));
  if (n > 0) write_fd(2, buf, static_cast<size_t>(std::min<int>(n, sizeof buf - 1)));
  _exit(127);
}

bool is_number(const char* s) {
  if (*s == '\0') return false;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

// Fields of /proc/PID/stat after the command name.
struct ProcStat {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t session = 0;
  long threads = 0;
  long rss_pages = 0;
  char state = '?';
};

bool read_proc_stat(pid_t pid, ProcStat& out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr) return false;
  // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  // cutime cstime priority nice num_threads itrealvalue starttime vsize rss
  char state = '?';
  long ppid = 0, pgrp = 0, session = 0, threads = 0, rss = 0;
  long skip = 0;
  unsigned long long vsize = 0, start = 0;
  int got =
      std::sscanf(close_paren + 2,
                  "%c %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld "
                  "%ld %llu %llu %ld",
                  &state, &ppid, &pgrp, &session, &skip, &skip, &skip, &skip, &skip, &skip, &skip,
                  &skip, &skip, &skip, &skip, &skip, &skip, &threads, &skip, &start, &vsize, &rss);
  if (got < 22) return false;
  out.pid = pid;
  out.ppid = static_cast<pid_t>(ppid);
  out.session = static_cast<pid_t>(session);
  out.threads = threads;
  out.rss_pages = rss;
  out.state = state;
  return true;
}

// Calls fn(pid, owner uid) for every process in /proc.
template <typename Fn>
void for_each_process(Fn&& fn) {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    if (!is_number(e->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(dir), e->d_name, &st, 0) != 0) continue;
    fn(static_cast<pid_t>(std::atol(e->d_name)), st.st_uid);
  }
  closedir(dir);
}

std::vector<pid_t> list_children() {
  std::vector<pid_t> out;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks != nullptr) {
    bool any_file = false;
    while (dirent* e = readdir(tasks)) {
      if (!is_number(e->d_name)) continue;
      std::string path = std::string("/proc/self/task/") + e->d_name + "/children";
      FILE* f = std::fopen(path.c_str(), "r");
      if (f == nullptr) continue;
      any_file = true;
      int pid;
      while (std::fscanf(f, "%d", &pid) == 1) out.push_back(static_cast<pid_t>(pid));
      std::fclose(f);
    }
    closedir(tasks);
    if (any_file) return out;
  }
  const pid_t self = getpid();
  for_each_process([&](pid_t pid, uid_t) {
    ProcStat ps;
    if (read_proc_stat(pid, ps) && ps.ppid == self) out.push_back(pid);
  });
  return out;
}

uint64_t count_user_tasks(uid_t uid) {
  uint64_t tasks = 0;
  for_each_process([&](pid_t pid, uid_t owner) {
    if (owner != uid) return;
    ProcStat ps;
    if (read_proc_stat(pid, ps)) tasks += static_cast<uint64_t>(std::max(1L, ps.threads));
  });
  return tasks;
}

// Removes a directory tree without following links, making unreadable
// directories readable first (a sandbox may chmod its own files).
void remove_tree_at(int parent_fd, const char* name) {
  if (unlinkat(parent_fd, name, 0) == 0) return;
  int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    fchmodat(parent_fd, name, 0700, 0);
    fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
  }
  fchmod(fd, 0700);
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  for (const auto& n : names) remove_tree_at(dirfd(dir), n.c_str());
  closedir(dir);
  unlinkat(parent_fd, name, AT_REMOVEDIR);
}

void remove_tree(const std::string& path) {
  if (path.empty()) return;
  remove_tree_at(AT_FDCWD, path.c_str());
}

// Total size and entry count of a directory tree, stopping at `max_entries`.
void dir_usage(int dir_fd, uint64_t& bytes, uint64_t& entries, uint64_t max_entries, int depth) {
  if (depth > 64) return;
  int fd = dup(dir_fd);
  if (fd < 0) return;
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return;
  }
  while (dirent* e = readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (++entries >= max_entries) break;
    struct stat st;
    if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    bytes += static_cast<uint64_t>(st.st_blocks) * 512u;
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(dirfd(dir), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        dir_usage(sub, bytes, entries, max_entries, depth + 1);
        ::close(sub);
      }
    }
  }
  closedir(dir);
}

void append_capped(CapturedStream& s, const char* data, size_t n, size_t keep) {
  s.total += n;
  const size_t half = std::max<size_t>(1, keep / 2);
  if (s.head.size() < half) {
    size_t take = std::min(n, half - s.head.size());
    s.head.append(data, take);
    data += take;
    n -= take;
  }
  if (n == 0) return;
  if (n >= half) {
    s.tail.assign(data + (n - half), half);
    return;
  }
  s.tail.append(data, n);
  if (s.tail.size() > 2 * half) s.tail.erase(0, s.tail.size() - half);
}

void finalize_tail(CapturedStream& s, size_t keep) {
  const size_t half = std::max<size_t>(1, keep / 2);
  if (s.tail.size() > half) s.tail.erase(0, s.tail.size() - half);
}

}  // namespace

const char* to_string(SandboxEnd end) {
  switch (end) {
    case SandboxEnd::exited:
      return "exited";
    case SandboxEnd::signaled:
      return "signaled";
    case SandboxEnd::wall_timeout:
      return "wall_timeout";
    case SandboxEnd::cpu_timeout:
      return "cpu_timeout";
    case SandboxEnd::memory_limit:
      return "memory_limit";
    case SandboxEnd::output_limit:
      return "output_limit";
    case SandboxEnd::process_limit:
      return "process_limit";
    case SandboxEnd::disk_limit:
      return "disk_limit";
    case SandboxEnd::setup_failed:
      return "setup_failed";
  }
  return "setup_failed";
}

std::string CapturedStream::text() const {
  if (!truncated()) return head + tail;
  uint64_t omitted = total - head.size() - tail.size();
  return head + "\n[... " + std::to_string(omitted) + " bytes omitted ...]\n" + tail;
}

std::string IsolationInfo::describe() const {
  std::vector<std::string> parts;
  parts.push_back(landlock_abi > 0 ? "landlock ABI " + std::to_string(landlock_abi)
                                   : std::string("no landlock"));
  if (landlock_fs) parts.push_back("writes confined to the sandbox dir");
  if (landlock_net) parts.push_back("no TCP");
  if (landlock_scope) parts.push_back("signals scoped");
  // Not the uid itself: which uids a harness gets depends on the harnesses running
  // beside it, and the report must not.
  if (uid_per_slot) parts.push_back("uid per slot");
  parts.push_back(kernel_nproc ? "kernel process limit" : "process count watched");
  parts.push_back(pidfd ? "pidfd" : "10 ms exit tick");
  return join(parts, ", ");
}

long self_peak_rss_kb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

std::string resolve_executable(const std::string& name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  for (const auto& dir : split(path ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return {};
}

// ---------------------------------------------------------------- Sandbox

struct Sandbox::Running {
  int slot = 0;
  pid_t pid = -1;
  int pidfd = -1;
  int out_fd = -1;
  int err_fd = -1;
  int res_fd = -1;
  std::string dir;
  SandboxLimits limits;
  bool exec_task = false;
  double start = 0.0;
  double deadline = 0.0;
  double last_disk_check = 0.0;
  bool exited = false;
  int status = 0;
  rusage usage{};
  std::optional<SandboxEnd> forced;
  long monitored_peak_kb = 0;
  SandboxResult result;
};

Sandbox::Sandbox(SandboxConfig config) : config_(std::move(config)) {
  config_.jobs = std::max(1, config_.jobs);
  info_.landlock_abi = landlock_abi();
  info_.landlock_fs = info_.landlock_abi >= 1;
  info_.landlock_net = info_.landlock_abi >= 4;
  info_.landlock_scope = info_.landlock_abi >= 6;
  info_.uid_per_slot = geteuid() == 0 && config_.uid_base != 0;
  info_.kernel_nproc = geteuid() != 0 || info_.uid_per_slot;
  int probe = static_cast<int>(syscall(kSysPidfdOpen, getpid(), 0));
  info_.pidfd = probe >= 0;
  if (probe >= 0) ::close(probe);
  if (!info_.uid_per_slot && geteuid() != 0) nproc_base_ = count_user_tasks(getuid());

  std::string root = config_.temp_root;
  if (root.empty()) {
    const char* t = std::getenv("TMPDIR");
    root = t && *t ? t : "/tmp";
  }
  std::string pattern = root + "/trex-eval-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr)
    throw Error(std::string("cannot create the sandbox directory: ") + std::strerror(errno))
        .file(pattern);
  run_dir_ = buf.data();
  if (info_.uid_per_slot) {
    chmod(run_dir_.c_str(), 0711);
    // A fixed place for the uid locks (not $TMPDIR, which may differ between harnesses).
    claim_uids(access("/run/lock", W_OK) == 0 ? "/run/lock" : "/tmp");
    info_.sandbox_uid_base = slot_uids_.front();
  }

  prctl(PR_GET_CHILD_SUBREAPER, &previous_subreaper_);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  preexisting_children_ = list_children();
  std::sort(preexisting_children_.begin(), preexisting_children_.end());
  // A claimed uid is ours alone: whatever still runs under it is left over
  // from a harness that died.
  for (uid_t uid : slot_uids_) kill_uid_processes(uid);
}

void Sandbox::claim_uids(const std::string& lock_dir) {
  // Concurrent harnesses (ctest -j, two evaluations) must not share uids: each
  // slot takes the first free uid from the base, held by an flock on
  // LOCK_DIR/trex-eval-uid-N.lock for the lifetime of this object.
  for (unsigned uid = config_.uid_base;
       slot_uids_.size() < static_cast<size_t>(config_.jobs) && uid < config_.uid_base + 65536;
       ++uid) {
    std::string path = lock_dir + "/trex-eval-uid-" + std::to_string(uid) + ".lock";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    uid_locks_.push_back(fd);
    slot_uids_.push_back(static_cast<uid_t>(uid));
  }
  if (slot_uids_.size() < static_cast<size_t>(config_.jobs))
    throw Error("cannot claim sandbox uids from " + std::to_string(config_.uid_base))
        .file(lock_dir)
        .field("--sandbox-uid");
}

Sandbox::~Sandbox() {
  for (int round = 0; round < 20; ++round) {
    reap_strays();
    if (round >= 2) break;
    usleep(2000);
  }
  remove_tree(run_dir_);
  for (int fd : uid_locks_) ::close(fd);
  prctl(PR_SET_CHILD_SUBREAPER, previous_subreaper_);
}

uid_t Sandbox::sandbox_uid(int slot) const {
  return info_.uid_per_slot ? slot_uids_.at(static_cast<size_t>(slot)) : geteuid();
}

void Sandbox::kill_uid_processes(uid_t uid, pid_t zombie) {
  // kill(-1) from a process running as `uid` reaches every process of that uid
  // (including ones that left the session), atomically with respect to fork.
  for (int round = 0; round < 400; ++round) {
    pid_t helper = fork();
    if (helper == 0) {
      if (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(1);
      kill(-1, SIGKILL);
      _exit(0);
    }
    if (helper > 0) {
      int status;
      while (waitpid(helper, &status, 0) < 0 && errno == EINTR) {
      }
    }
    reap_strays();
    bool left = false;
    for_each_process([&](pid_t pid, uid_t owner) {
      if (owner == uid && pid != getpid() && pid != zombie) left = true;
    });
    if (!left) return;
    usleep(round < 20 ? 500 : 5000);
  }
}

void Sandbox::kill_session_processes(pid_t sid) {
  // Until no process of the session is left (zombies reparented to this
  // process count too: they hold the user's process count until reaped).
  for (int round = 0; round < 400; ++round) {
    bool left = false;
    for_each_process([&](pid_t pid, uid_t) {
      ProcStat ps;
      if (pid != sid && read_proc_stat(pid, ps) && ps.session == sid) {
        left = true;
        kill(pid, SIGKILL);
      }
    });
    reap_strays();
    if (!left) return;
    usleep(round < 20 ? 500 : 5000);
  }
}

void Sandbox::reap_strays() {
  for (pid_t pid : list_children()) {
    if (std::binary_search(preexisting_children_.begin(), preexisting_children_.end(), pid))
      continue;
    if (known_.count(pid)) continue;
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, WNOHANG);
  }
}

void Sandbox::start(Running& r, int slot, const std::string& dir, SandboxTask&& task) {
  r = Running{};
  r.slot = slot;
  r.limits = task.limits;
  r.exec_task = !task.in_child;
  r.start = now_seconds();
  r.deadline = r.start + task.limits.wall_seconds;
  r.dir = dir;
  auto fail = [&](const std::string& why) {
    r.result.end = SandboxEnd::setup_failed;
    r.result.setup_error = why + ": " + std::strerror(errno);
    r.exited = true;
  };
  if (mkdir(r.dir.c_str(), 0700) != 0) return fail("cannot create " + r.dir);
  const uid_t uid = sandbox_uid(slot);
  if (info_.uid_per_slot && chown(r.dir.c_str(), uid, uid) != 0) return fail("cannot chown");
  for (const auto& [name, content] : task.files) {
    if (name.empty() || name.find('/') != std::string::npos) {
      errno = EINVAL;
      return fail("bad sandbox file name '" + name + "'");
    }
    std::string path = r.dir + "/" + name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return fail("cannot create " + path);
    write_fd(fd, content.data(), content.size());
    ::close(fd);
  }
  if (task.in_child == nullptr && (task.argv.empty() || task.argv[0].empty())) {
    errno = EINVAL;
    return fail("empty command");
  }

  int out_pipe[2], err_pipe[2], res_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return fail("pipe");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return fail("pipe");
  }
  if (pipe2(res_pipe, O_CLOEXEC) != 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return fail("pipe");
  }

  // Everything the child needs is prepared before fork.
  std::vector<char*> argv, envp;
  std::vector<std::string> env = task.env;
  env.push_back("HOME=" + r.dir);
  env.push_back("TMPDIR=" + r.dir);
  for (auto& a : task.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const SandboxLimits lim = task.limits;
  const int abi = info_.landlock_abi;
  const bool drop_uid = info_.uid_per_slot;
  const bool set_nproc = info_.kernel_nproc;
  // Without a uid per slot the limit is shared by the user's processes: each
  // slot's share, its pool worker, and some room for the harness's own.
  const uint64_t nproc_limit = drop_uid ? static_cast<uint64_t>(lim.max_processes)
                                        : nproc_base_ +
                                              static_cast<uint64_t>(config_.jobs) *
                                                  (static_cast<uint64_t>(lim.max_processes) + 1u) +
                                              64u;
  ProcessLimits child_limits;
  child_limits.cpu_seconds = std::max(0.1, lim.cpu_seconds);
  if (!task.in_child || kLimitAddressSpaceInChild)
    child_limits.address_space_bytes = lim.memory_bytes;
  child_limits.file_size_bytes = lim.file_size_bytes;
  child_limits.open_files = static_cast<uint64_t>(lim.max_open_files);
  child_limits.core_dumps = false;
  if (set_nproc) child_limits.processes = nproc_limit;
  const pid_t parent = getpid();

  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], res_pipe[0], res_pipe[1]})
      ::close(fd);
    return fail("fork");
  }
  if (pid == 0) {
    // ---- child: only setup calls until exec (or the in-process task).
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGPIPE, SIGXFSZ, SIGXCPU, SIGINT, SIGTERM, SIGHUP, SIGCHLD})
      signal(sig, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    int hi_out = fcntl(out_pipe[1], F_DUPFD_CLOEXEC, 10);
    int hi_err = fcntl(err_pipe[1], F_DUPFD_CLOEXEC, 10);
    int hi_res = fcntl(res_pipe[1], F_DUPFD_CLOEXEC, 10);
    int hi_null = fcntl(devnull, F_DUPFD_CLOEXEC, 10);
    if (hi_out < 0 || hi_err < 0 || hi_res < 0 || hi_null < 0) _exit(127);
    dup2(hi_null, 0);
    dup2(hi_out, 1);
    dup2(hi_err, 2);
    dup2(hi_res, 3);
    // Close everything else (other sandboxes' pipes, the harness's files).
    if (syscall(kSysCloseRange, 4u, ~0u, 0u) != 0) {
      rlimit nofile{};
      getrlimit(RLIMIT_NOFILE, &nofile);
      const int top = static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1u << 16));
      for (int fd = 4; fd < top; ++fd) ::close(fd);
    }
    int dir_fd = ::open(r.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    int null_path_fd = ::open("/dev/null", O_PATH | O_CLOEXEC);
    if (dir_fd < 0) child_fail("cannot open the sandbox directory", errno);
    if (chdir(r.dir.c_str()) != 0) child_fail("chdir", errno);
    apply_process_limits(child_limits);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_fail("no_new_privs", errno);
    if (!apply_landlock(abi, dir_fd, null_path_fd)) child_fail("landlock", errno);
    ::close(dir_fd);
    if (null_path_fd >= 0) ::close(null_path_fd);
    if (drop_uid) {
      if (setgroups(0, nullptr) != 0) child_fail("setgroups", errno);
      if (setresgid(uid, uid, uid) != 0) child_fail("setresgid", errno);
      if (setresuid(uid, uid, uid) != 0) child_fail("setresuid", errno);
    }
    // Credential changes clear the parent-death signal: set it (again) last.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (task.in_child) {
      setenv("TMPDIR", r.dir.c_str(), 1);
      setenv("HOME", r.dir.c_str(), 1);
      try {
        task.in_child(3);
      } catch (const std::exception& e) {
        std::string msg = std::string("trex sandbox: task failed: ") + e.what() + "\n";
        write_fd(2, msg.data(), msg.size());
        _exit(70);
      } catch (...) {
        _exit(70);
      }
      _exit(0);
    }
    execve(argv[0], argv.data(), envp.data());
    int exec_errno = errno;
    char what[600];
    std::snprintf(what, sizeof what, "cannot execute %s", argv[0]);
    child_fail(what, exec_errno);
  }
  // ---- parent
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::close(res_pipe[1]);
  r.pid = pid;
  known_.insert(pid);
  r.out_fd = out_pipe[0];
  r.err_fd = err_pipe[0];
  r.res_fd = res_pipe[0];
  for (int fd : {r.out_fd, r.err_fd, r.res_fd}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (info_.pidfd) r.pidfd = static_cast<int>(syscall(kSysPidfdOpen, pid, 0));
}

namespace {

// Reads what is available; returns false at EOF or error (fd closed).
bool drain(int& fd, CapturedStream& s, size_t keep) {
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      append_capped(s, buf, static_cast<size_t>(n), keep);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    ::close(fd);
    fd = -1;
    return false;
  }
}

bool drain_result(int& fd, std::string& out, size_t max, bool& truncated) {
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      size_t room = max > out.size() ? max - out.size() : 0;
      out.append(buf, std::min(room, static_cast<size_t>(n)));
      if (static_cast<size_t>(n) > room) truncated = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    ::close(fd);
    fd = -1;
    return false;
  }
}

}  // namespace

void Sandbox::kill_sandbox(Running& r) {
  if (r.pid <= 0) return;
  killpg(r.pid, SIGKILL);
  kill(r.pid, SIGKILL);
  if (!info_.uid_per_slot) {
    // Everything still in the child's session (process groups inside it).
    for_each_process([&](pid_t pid, uid_t) {
      ProcStat ps;
      if (read_proc_stat(pid, ps) && ps.session == r.pid) kill(pid, SIGKILL);
    });
  }
}

void Sandbox::monitor(Running& r, double now) {
  // Only a sandbox that has run a while is measured (most finish in ms).
  if (r.exited || r.forced || now - r.start <= 0.15) return;
  uint64_t rss_kb = 0;
  long tasks = 0;
  const long page_kb = sysconf(_SC_PAGESIZE) / 1024;
  const uid_t uid = sandbox_uid(r.slot);
  for_each_process([&](pid_t pid, uid_t owner) {
    ProcStat ps;
    if (info_.uid_per_slot) {
      if (owner != uid || !read_proc_stat(pid, ps)) return;
    } else {
      if (!read_proc_stat(pid, ps) || ps.session != r.pid) return;
    }
    rss_kb += static_cast<uint64_t>(std::max(0L, ps.rss_pages) * page_kb);
    tasks += std::max(1L, ps.threads);
  });
  r.monitored_peak_kb = std::max(r.monitored_peak_kb, static_cast<long>(rss_kb));
  if (rss_kb * 1024 > r.limits.memory_bytes) {
    r.forced = SandboxEnd::memory_limit;
  } else if (!info_.uid_per_slot && tasks > r.limits.max_processes) {
    // Without a uid per slot the kernel limit (if any) is per user, shared by
    // all slots: a sandbox over its own share is stopped here.
    r.forced = SandboxEnd::process_limit;
  } else if (now - r.last_disk_check > 0.5) {
    r.last_disk_check = now;
    int fd = ::open(r.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      uint64_t bytes = 0, entries = 0;
      const uint64_t max_entries = 20000;
      dir_usage(fd, bytes, entries, max_entries, 0);
      ::close(fd);
      if (bytes > r.limits.disk_bytes || entries >= max_entries) r.forced = SandboxEnd::disk_limit;
    }
  }
  if (r.forced) kill_sandbox(r);
}

SandboxResult Sandbox::finish(Running& r) {
  SandboxResult& res = r.result;
  if (r.pid > 0) {
    // Collect what is still buffered, then remove every leftover process.
    if (r.out_fd >= 0) drain(r.out_fd, res.out, r.limits.keep_output_bytes);
    if (r.err_fd >= 0) drain(r.err_fd, res.err, r.limits.keep_output_bytes);
    if (r.res_fd >= 0)
      drain_result(r.res_fd, res.result, r.limits.max_result_bytes, res.result_truncated);
    // The child is a zombie until reaped below, so its pid (the process group
    // and session id) cannot have been reused by an unrelated process yet.
    kill_sandbox(r);
    if (info_.uid_per_slot && r.exec_task)
      kill_uid_processes(sandbox_uid(r.slot), r.pid);
    else if (r.exec_task)
      kill_session_processes(r.pid);
    while (wait4(r.pid, &r.status, 0, &r.usage) < 0 && errno == EINTR) {
    }
    known_.erase(r.pid);
    reap_strays();
    finalize_tail(res.out, r.limits.keep_output_bytes);
    finalize_tail(res.err, r.limits.keep_output_bytes);
    res.wall_seconds = now_seconds() - r.start;
    res.cpu_seconds =
        static_cast<double>(r.usage.ru_utime.tv_sec + r.usage.ru_stime.tv_sec) +
        1e-6 * static_cast<double>(r.usage.ru_utime.tv_usec + r.usage.ru_stime.tv_usec);
    res.peak_rss_kb = std::max(r.usage.ru_maxrss, r.monitored_peak_kb);
    if (WIFEXITED(r.status)) {
      res.exit_code = WEXITSTATUS(r.status);
    } else if (WIFSIGNALED(r.status)) {
      res.signal = WTERMSIG(r.status);
    }
    if (r.forced) {
      res.end = *r.forced;
    } else if (starts_with(res.result, kSetupMarker)) {
      res.end = SandboxEnd::setup_failed;
      res.setup_error = res.result.substr(sizeof kSetupMarker - 1);
    } else if (WIFEXITED(r.status)) {
      res.end = SandboxEnd::exited;
    } else if (res.signal == SIGXCPU ||
               (res.signal == SIGKILL && res.cpu_seconds >= r.limits.cpu_seconds - 0.05)) {
      res.end = SandboxEnd::cpu_timeout;
    } else {
      res.end = SandboxEnd::signaled;
    }
  }
  for (int* fd : {&r.out_fd, &r.err_fd, &r.res_fd, &r.pidfd})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  remove_tree(r.dir);
  return std::move(r.result);
}

void Sandbox::watch(Running& r) {
  double last_monitor = 0.0;
  while (!r.exited) {
    std::vector<pollfd> fds;
    std::vector<int> kinds;  // 0 out, 1 err, 2 res, 3 pidfd
    double now = now_seconds();
    double wait = 0.1;
    if (r.out_fd >= 0) fds.push_back({r.out_fd, POLLIN, 0}), kinds.push_back(0);
    if (r.err_fd >= 0) fds.push_back({r.err_fd, POLLIN, 0}), kinds.push_back(1);
    if (r.res_fd >= 0) fds.push_back({r.res_fd, POLLIN, 0}), kinds.push_back(2);
    if (r.pidfd >= 0)
      fds.push_back({r.pidfd, POLLIN, 0}), kinds.push_back(3);
    else
      wait = std::min(wait, 0.01);
    wait = std::min(wait, std::max(0.0, r.deadline - now));
    int timeout_ms = static_cast<int>(std::ceil(wait * 1000.0));
    int rc = poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) throw Error(std::string("poll failed: ") + std::strerror(errno));
    for (size_t k = 0; rc > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      switch (kinds[k]) {
        case 0:
          drain(r.out_fd, r.result.out, r.limits.keep_output_bytes);
          break;
        case 1:
          drain(r.err_fd, r.result.err, r.limits.keep_output_bytes);
          break;
        case 2:
          drain_result(r.res_fd, r.result.result, r.limits.max_result_bytes,
                       r.result.result_truncated);
          break;
        default:
          break;
      }
    }
    now = now_seconds();
    if (!r.forced && (r.result.out.total > r.limits.kill_output_bytes ||
                      r.result.err.total > r.limits.kill_output_bytes)) {
      r.forced = SandboxEnd::output_limit;
      kill_sandbox(r);
    }
    if (!r.forced && now >= r.deadline) {
      r.forced = SandboxEnd::wall_timeout;
      kill_sandbox(r);
    }
    // Exited? (not reaped yet: see finish)
    siginfo_t si{};
    if (waitid(P_PID, static_cast<id_t>(r.pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        si.si_pid == r.pid)
      r.exited = true;
    if (now - last_monitor >= 0.1) {
      last_monitor = now;
      monitor(r, now);
      reap_strays();
    }
  }
}

SandboxResult Sandbox::run_task(int slot, const std::string& dir, SandboxTask&& task) {
  // The uid locks are the harness's: a worker dying with a killed harness must
  // not hold them from the next harness a moment longer.
  for (int fd : uid_locks_) ::close(fd);
  uid_locks_.clear();
  // This pool worker is the task child's parent: as a subreaper it also
  // adopts whatever the task leaves behind, so cleaning up stays here.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  preexisting_children_.clear();
  known_.clear();
  Running r;
  start(r, slot, dir, std::move(task));
  if (r.pid > 0) watch(r);
  return finish(r);
}

namespace {

// A task's pool worker sends its result back to the harness.
void put_stream(MessageWriter& out, const CapturedStream& s) {
  out.put(s.head).put(s.tail).put(s.total);
}

CapturedStream get_stream(MessageReader& in) {
  CapturedStream s;
  s.head = in.get_string();
  s.tail = in.get_string();
  s.total = in.get<uint64_t>();
  return s;
}

std::string encode(const SandboxResult& r) {
  MessageWriter out;
  out.put(r.end).put(r.exit_code).put(r.signal).put(r.wall_seconds).put(r.cpu_seconds);
  out.put(r.peak_rss_kb);
  put_stream(out, r.out);
  put_stream(out, r.err);
  out.put(r.result).put(r.result_truncated).put(r.setup_error);
  return out.take();
}

SandboxResult decode(const PoolResult& pool_result) {
  SandboxResult r;
  if (!pool_result.ok()) {
    // The worker itself failed (not the task): a harness-side fault.
    r.end = SandboxEnd::setup_failed;
    r.setup_error =
        "sandbox worker " + std::string(to_string(pool_result.status)) + ": " + pool_result.error;
    return r;
  }
  MessageReader in(pool_result.response);
  r.end = in.get<SandboxEnd>();
  r.exit_code = in.get<int>();
  r.signal = in.get<int>();
  r.wall_seconds = in.get<double>();
  r.cpu_seconds = in.get<double>();
  r.peak_rss_kb = in.get<long>();
  r.out = get_stream(in);
  r.err = get_stream(in);
  r.result = in.get_string();
  r.result_truncated = in.get<bool>();
  r.setup_error = in.get_string();
  return r;
}

// How long a task's worker may take beyond the task's wall-time limit (set-up
// and clean-up) before the pool kills it.
constexpr double kWorkerGraceSeconds = 60.0;

}  // namespace

void Sandbox::run(const Next& next, const Done& done) {
  struct Pending {
    int64_t id = 0;
    std::string dir;
    SandboxTask task;
  };
  std::map<int64_t, Pending> pending;  // by pool item id
  int64_t item_counter = 0;
  ProcessPoolOptions options;
  options.workers = config_.jobs;
  // A fresh worker per task: it is forked when the task starts, so it sees the
  // task (an in_child function cannot be sent to a long-lived worker).
  options.process_per_item = true;
  options.in_order = false;
  ProcessPool pool(options, [&](int slot, const PoolItem& item) {
    Pending& p = pending.at(item.id);
    return encode(run_task(slot, p.dir, std::move(p.task)));
  });
  pool.run(
      [&]() -> std::optional<PoolItem> {
        auto next_task = next();
        if (!next_task) return std::nullopt;
        PoolItem item;
        item.id = item_counter++;
        item.timeout_seconds = next_task->second.limits.wall_seconds + kWorkerGraceSeconds;
        pending.emplace(item.id,
                        Pending{next_task->first, run_dir_ + "/t" + std::to_string(task_counter_++),
                                std::move(next_task->second)});
        return item;
      },
      [&](const PoolItem& item, PoolResult&& result) {
        auto node = pending.extract(item.id);
        done(node.mapped().id, decode(result));
      });
}

SandboxResult Sandbox::run_one(SandboxTask task) {
  SandboxResult out;
  bool given = false;
  run(
      [&]() -> std::optional<std::pair<int64_t, SandboxTask>> {
        if (given) return std::nullopt;
        given = true;
        return std::make_pair(int64_t{0}, std::move(task));
      },
      [&](int64_t, SandboxResult&& r) { out = std::move(r); });
  return out;
}

}  // namespace trex::orlib::eval
