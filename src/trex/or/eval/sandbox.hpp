#pragma once
// Resource-limited child processes for untrusted completions.
//
// Every task runs in a fresh child process, in a fresh temporary directory, with
// CPU-time, wall-time, address-space, file-size, open-file and process-count
// limits, stdin from /dev/null, and stdout/stderr captured through pipes whose
// kept size is capped (a child that floods past the hard cap is killed). On
// Linux with Landlock the child can write only inside its own directory, cannot
// open TCP connections and cannot signal processes outside its sandbox. When
// the harness runs as root, each job slot runs under its own unprivileged uid,
// so the kernel enforces the process-count limit and every leftover process of
// a finished task can be killed at once. Tasks are scheduled by the process
// pool (core/process_pool): each task gets a fresh pool worker that sets up,
// watches and cleans up its one sandboxed child, so the harness never runs
// untrusted code and never waits on a task itself.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace trex::orlib::eval {

struct SandboxLimits {
  double wall_seconds = 60.0;
  double cpu_seconds = 60.0;
  uint64_t memory_bytes = 4ull << 30;      // RLIMIT_AS per process and the sandbox's total RSS
  uint64_t file_size_bytes = 64ull << 20;  // RLIMIT_FSIZE
  uint64_t disk_bytes = 256ull << 20;      // total size of the sandbox directory
  int max_processes = 64;                  // tasks (processes + threads) of the sandbox
  int max_open_files = 256;
  size_t keep_output_bytes = 64u << 10;      // per stream: first and last half kept
  uint64_t kill_output_bytes = 16ull << 20;  // per stream: the child is killed past this
  size_t max_result_bytes = 4u << 20;        // the result channel (fd 3)
};

struct SandboxTask {
  // Either an executable with arguments (argv[0] is an absolute path) ...
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value"; HOME and TMPDIR are set to the sandbox dir
  // ... or a function run in the forked child in place of exec. It may write
  // its result to `result_fd`; the child exits when it returns.
  std::function<void(int result_fd)> in_child;
  // Files created in the sandbox directory before the child starts.
  std::vector<std::pair<std::string, std::string>> files;
  SandboxLimits limits;
};

enum class SandboxEnd {
  exited,         // the child exited by itself (see exit_code)
  signaled,       // killed by a signal it raised or received (see signal)
  wall_timeout,   // killed at the wall-time limit
  cpu_timeout,    // killed by RLIMIT_CPU
  memory_limit,   // total RSS above the limit (address-space failures show as exits/signals)
  output_limit,   // stdout or stderr exceeded kill_output_bytes
  process_limit,  // more tasks than max_processes observed (when the kernel cannot enforce it)
  disk_limit,     // sandbox directory above disk_bytes
  setup_failed,   // the sandbox could not be set up or the executable could not be started
};
const char* to_string(SandboxEnd end);

struct CapturedStream {
  std::string head;
  std::string tail;
  uint64_t total = 0;
  // head + tail, with a marker for the bytes left out in between.
  std::string text() const;
  bool truncated() const { return total > head.size() + tail.size(); }
};

struct SandboxResult {
  SandboxEnd end = SandboxEnd::setup_failed;
  int exit_code = -1;
  int signal = 0;
  double wall_seconds = 0.0;
  double cpu_seconds = 0.0;
  long peak_rss_kb = 0;
  CapturedStream out;
  CapturedStream err;
  std::string result;  // bytes written to fd 3
  bool result_truncated = false;
  std::string setup_error;
};

// What the running kernel and privileges allow; reported in report.json.
struct IsolationInfo {
  bool landlock_fs = false;     // writes confined to the sandbox directory
  bool landlock_net = false;    // TCP bind/connect denied
  bool landlock_scope = false;  // signals / abstract sockets confined to the sandbox
  bool uid_per_slot = false;    // root: one unprivileged uid per job slot
  bool kernel_nproc = false;    // RLIMIT_NPROC is enforced by the kernel
  bool pidfd = false;           // exit notification through pidfd (else a 10 ms tick)
  int landlock_abi = 0;
  unsigned sandbox_uid_base = 0;  // the first slot's uid
  std::string describe() const;
};

struct SandboxConfig {
  int jobs = 1;
  // When running as root: the per-slot uids are the first free ones from this
  // base (claimed with lock files, so concurrent harnesses never share one).
  // 0 keeps root (process counts are then only watched, not kernel-enforced).
  unsigned uid_base = 61000;
  // Parent directory for the per-task directories (default: $TMPDIR or /tmp).
  std::string temp_root;
};

class Sandbox {
 public:
  explicit Sandbox(SandboxConfig config);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  const IsolationInfo& isolation() const { return info_; }
  int jobs() const { return config_.jobs; }
  uid_t sandbox_uid(int slot) const;

  // Runs tasks produced by `next` with up to jobs() children at a time;
  // `done(id, result)` is called in this process as each finishes, with the id
  // `next` returned alongside the task. `next` returning std::nullopt means
  // "nothing now"; the run ends when it does so while no task is running.
  using Next = std::function<std::optional<std::pair<int64_t, SandboxTask>>()>;
  using Done = std::function<void(int64_t id, SandboxResult&& result)>;
  void run(const Next& next, const Done& done);

  // Convenience: one task, synchronously.
  SandboxResult run_one(SandboxTask task);

 private:
  struct Running;
  // In a pool worker: one task from set-up to clean-up, in directory `dir`.
  SandboxResult run_task(int slot, const std::string& dir, SandboxTask&& task);
  void start(Running& r, int slot, const std::string& dir, SandboxTask&& task);
  void watch(Running& r);
  SandboxResult finish(Running& r);
  void monitor(Running& r, double now);
  void kill_sandbox(Running& r);
  void reap_strays();
  // Kills every process of `uid` and waits until none is left (`zombie`, the
  // task's own unreaped child, is not waited for).
  void kill_uid_processes(uid_t uid, pid_t zombie = -1);
  void claim_uids(const std::string& lock_dir);
  // The same for the session `sid` (whose leader, the unreaped task child, is skipped).
  void kill_session_processes(pid_t sid);

  SandboxConfig config_;
  IsolationInfo info_;
  std::string run_dir_;
  uint64_t task_counter_ = 0;
  std::vector<pid_t> preexisting_children_;
  std::set<pid_t> known_;         // the running task child (not a stray)
  std::vector<uid_t> slot_uids_;  // root: the uid of each slot
  std::vector<int> uid_locks_;    // flocks holding those uids
  int previous_subreaper_ = 0;
  uint64_t nproc_base_ = 0;  // non-root: tasks of this uid when the sandbox was created
};

// Resolves a program name through PATH (names with '/' are returned as given);
// empty when not found.
std::string resolve_executable(const std::string& name);

// The harness's own peak resident set size in KiB (getrusage RUSAGE_SELF).
long self_peak_rss_kb();

}  // namespace trex::orlib::eval
