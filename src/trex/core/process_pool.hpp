#pragma once
// A pool of forked worker processes, for work that must not take the caller
// down with it: GLPK and CBC keep global state and may abort on internal
// errors, and untrusted completions run confined (or/eval/sandbox). An item
// whose worker crashes or runs past its time limit is reported as that item's
// failure and the worker is replaced; the other items are not affected.
//
// A worker is a fork() of this process and sees its memory as it was when the
// worker started. Long-lived workers (the default) take items over a socket;
// each starts at its slot's first item (or to replace a failed worker), so what
// `work` reads must be in place before `run` and must not change while it
// runs. With `process_per_item` every item gets a fresh worker, forked when the
// item starts, so it also sees what next() prepared for that item; for
// set-ups that cannot be undone, such as a sandbox's Landlock rules.
// Linux only (prctl, setrlimit).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace trex {

// Resource limits set in a child process with setrlimit (soft = hard except
// for CPU time); unset fields keep what the child inherited.
struct ProcessLimits {
  std::optional<double> cpu_seconds;  // SIGXCPU at the rounded-up value, SIGKILL a second later
  std::optional<uint64_t> address_space_bytes;  // RLIMIT_AS
  std::optional<uint64_t> file_size_bytes;      // RLIMIT_FSIZE
  std::optional<uint64_t> open_files;           // RLIMIT_NOFILE
  std::optional<uint64_t> processes;            // RLIMIT_NPROC (counted per user)
  bool core_dumps = true;                       // false: RLIMIT_CORE 0
};

// Applies `limits` to the calling process (a freshly forked child).
void apply_process_limits(const ProcessLimits& limits);

struct ProcessPoolOptions {
  int workers = 1;                  // concurrent workers; 0 runs every item in this process
  bool process_per_item = false;    // a fresh worker per item instead of long-lived ones
  double item_timeout_seconds = 0;  // wall time an item may take (0: no limit)
  bool in_order = true;             // done() in the order next() gave the items; else as they end
  ProcessLimits limits;             // set in every worker
};

struct PoolItem {
  int64_t id = 0;
  int32_t attempt = 0;           // passed through: callers that retry an item count here
  std::string request;           // sent to the worker
  double timeout_seconds = 0.0;  // this item's wall-time limit (0: the pool's)
};

enum class PoolStatus {
  ok,         // `work` returned
  failed,     // `work` threw; `error` holds the message
  crashed,    // the worker died during the item
  timed_out,  // the item ran past its time limit and the worker was killed
};
const char* to_string(PoolStatus status);

struct PoolResult {
  PoolStatus status = PoolStatus::ok;
  std::string response;  // ok: what `work` returned
  std::string error;     // otherwise: what went wrong, e.g. "worker killed by signal 6"
  int signal = 0;        // crashed: the signal that ended the worker (0 if it exited)
  bool ok() const { return status == PoolStatus::ok; }
};

class ProcessPool {
 public:
  // Runs in a worker. `slot` (0 .. workers-1) is the worker's place in the
  // pool: no two items run in the same slot at the same time.
  using Work = std::function<std::string(int slot, const PoolItem& item)>;
  // Called in this process. nullopt means "nothing now": run() asks again
  // after each done(), and ends when there is nothing now and nothing running.
  using Next = std::function<std::optional<PoolItem>()>;
  using Done = std::function<void(const PoolItem& item, PoolResult&& result)>;

  ProcessPool(ProcessPoolOptions options, Work work);
  // Idle workers exit when their socket closes; busy ones are killed.
  ~ProcessPool();
  ProcessPool(const ProcessPool&) = delete;
  ProcessPool& operator=(const ProcessPool&) = delete;

  // If next() or done() throws, the items still running are abandoned (their
  // workers killed) before the exception leaves run().
  void run(const Next& next, const Done& done);
  PoolResult run_one(PoolItem item);

 private:
  struct Slot;
  void dispatch(Slot& slot, PoolItem&& item, uint64_t sequence);
  void start_worker(Slot& slot, const PoolItem* only_item);
  [[noreturn]] void worker_main(int slot, int fd, const PoolItem* only_item);
  // Reads what the worker sent; true when the item has ended (result set).
  bool receive(Slot& slot, PoolResult& result);
  void end_worker(Slot& slot, bool kill_first, int* status);
  PoolResult crash_result(Slot& slot);
  void abandon_running();

  ProcessPoolOptions options_;
  Work work_;
  std::vector<Slot> slots_;
};

// A byte encoding for requests and responses: numbers are copied as they are
// in memory (the peer is a fork of this process), strings are length-prefixed.
class MessageWriter {
 public:
  template <typename T>
  requires(std::is_arithmetic_v<T> || std::is_enum_v<T>) MessageWriter& put(T value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof value);
    return *this;
  }
  MessageWriter& put(std::string_view text);
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class MessageReader {
 public:
  explicit MessageReader(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  requires(std::is_arithmetic_v<T> || std::is_enum_v<T>) T get() {
    T value;
    take(&value, sizeof value);
    return value;
  }
  std::string get_string();

 private:
  void take(void* out, size_t size);
  std::string_view bytes_;
};

}  // namespace trex
