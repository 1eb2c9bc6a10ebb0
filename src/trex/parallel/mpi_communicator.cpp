// MPI implementation of Communicator.
//
// One communication progress thread owns MPI: it initialises it
// (MPI_THREAD_FUNNELED — no other thread ever calls MPI), starts every
// operation as a non-blocking MPI call in submission order, and polls the
// active ones with MPI_Testall until they complete. Callers only enqueue and
// wait on a condition variable, so a collective started before a compute phase
// progresses while the compute threads run, and a rank blocked in wait() uses
// no CPU (ranks oversubscribe cores in tests).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <thread>
#include <type_traits>

#include "trex/core/error.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/pending.hpp"

namespace trex::parallel {
namespace {

MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kU8:
      return MPI_UINT8_T;
    case DType::kBF16:
      return MPI_UINT16_T;  // moved, never reduced (refuse_reduction)
  }
  throw Error("unknown communication data type");
}

// MPI has no bf16 arithmetic: summing the bits as integers would be a silent
// wrong answer.
void refuse_reduction(DType type, const char* what) {
  if (type == DType::kBF16)
    throw Error(std::string(what) + ": bf16 values are moved, not reduced (reduce in f32)");
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  throw Error("unknown reduction");
}

// Elements per MPI call: MPI counts are int, so a larger buffer travels as
// several messages (set lower by tests to exercise that path).
std::atomic<int64_t> message_limit{INT_MAX};
std::atomic<bool> equal_counts_only_flag{false};

// The tag of the point-to-point messages of a split all-to-all; isend/irecv refuse it.
constexpr int kSplitAllToAllTag = 32767;  // MPI guarantees tags up to at least this

int mpi_count(int64_t count, const char* what) {
  if (count < 0 || count > INT_MAX)
    throw Error(std::string(what) + ": element count " + std::to_string(count) +
                " outside MPI's int range (split the buffer)");
  return static_cast<int>(count);
}

// [offset, offset + n) pieces of [0, count), each within the message limit; one
// (possibly empty) piece when count fits, so every rank posts the same calls.
struct Piece {
  int64_t offset;
  int count;
};
std::vector<Piece> pieces(int64_t count, const char* what) {
  if (count < 0) throw Error(std::string(what) + ": negative element count");
  const int64_t limit = message_limit.load(std::memory_order_relaxed);
  std::vector<Piece> out;
  int64_t at = 0;
  do {
    const int64_t n = std::min(limit, count - at);
    out.push_back({at, static_cast<int>(n)});
    at += n;
  } while (at < count);
  return out;
}

template <class T>
T* byte_offset(T* base, int64_t elements, DType type) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(base) +
                              elements * static_cast<int64_t>(dtype_size(type)));
}

// Whether counts (and their sum, the largest displacement) fit in one MPI call.
bool fits_one_call(std::span<const int64_t> counts) {
  const int64_t limit = message_limit.load(std::memory_order_relaxed);
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0 || c > limit) return false;
    total += c;
  }
  return total <= limit;
}

std::vector<int64_t> offsets_of(std::span<const int64_t> counts) {
  std::vector<int64_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(std::string(what) + ": " + std::string(text, static_cast<size_t>(length)));
}

// An operation queued for the progress thread: `start` runs there and posts
// non-blocking MPI calls into `requests`; the v-collectives' count and
// displacement arrays live here until completion, as MPI requires.
struct Operation {
  std::function<void(Operation&)> start;
  std::vector<MPI_Request> requests;
  std::vector<int> counts_a, displs_a, counts_b, displs_b;
  std::shared_ptr<detail::Pending> pending;
};

class Runtime {
 public:
  static Runtime& instance() {
    static Runtime runtime;
    return runtime;
  }

  // Runs `start` on the progress thread; the request completes when every MPI
  // request it posted has.
  std::shared_ptr<detail::Pending> submit(std::function<void(Operation&)> start, CommStats* stats) {
    auto op = std::make_unique<Operation>();
    op->start = std::move(start);
    op->pending = std::make_shared<detail::Pending>();
    op->pending->stats = stats;
    auto pending = op->pending;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) throw Error("MPI communication used after shutdown");
      queue_.push_back(std::move(op));
    }
    wake_.notify_one();
    return pending;
  }

  // Runs `work` on the progress thread and waits for it (setup calls such as
  // MPI_Comm_split); its exception is rethrown here.
  void run(const std::function<void()>& work) {
    std::promise<void> done;
    auto future = done.get_future();
    submit(
        [&](Operation&) {
          try {
            work();
            done.set_value();
          } catch (...) {
            done.set_exception(std::current_exception());
          }
        },
        nullptr);
    future.get();
  }

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  Runtime() {
    std::promise<void> started;
    auto future = started.get_future();
    thread_ = std::thread([this, &started] { loop(started); });
    try {
      future.get();
    } catch (...) {
      thread_.join();
      throw;
    }
  }

  ~Runtime() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  void loop(std::promise<void>& started) {
    int provided = 0;
    int initialized = 0;
    MPI_Initialized(&initialized);
    const int code = initialized
                         ? MPI_SUCCESS
                         : MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (code != MPI_SUCCESS) {
      started.set_exception(std::make_exception_ptr(Error("MPI_Init_thread failed")));
      return;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    started.set_value();

    std::vector<std::unique_ptr<Operation>> active;
    for (;;) {
      std::deque<std::unique_ptr<Operation>> fresh;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (active.empty())
          wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        else if (queue_.empty())
          // Active requests: poll, but yield the core between polls.
          wake_.wait_for(lock, std::chrono::microseconds(50), [&] { return !queue_.empty(); });
        fresh.swap(queue_);
        if (stopping_ && fresh.empty() && active.empty()) break;
      }
      for (auto& op : fresh) {
        try {
          op->start(*op);
        } catch (const std::exception& e) {
          complete_all_posted(*op);
          op->pending->complete(e.what());
          continue;
        }
        if (op->requests.empty()) {
          op->pending->complete();
        } else {
          active.push_back(std::move(op));
        }
      }
      for (size_t i = 0; i < active.size();) {
        Operation& op = *active[i];
        int flag = 0;
        const int code = MPI_Testall(static_cast<int>(op.requests.size()), op.requests.data(),
                                     &flag, MPI_STATUSES_IGNORE);
        if (code != MPI_SUCCESS || flag) {
          op.pending->complete(code == MPI_SUCCESS ? std::string() : "MPI request failed");
          active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  // An operation whose start failed half-way: wait out what it did post.
  static void complete_all_posted(Operation& op) {
    if (!op.requests.empty())
      MPI_Waitall(static_cast<int>(op.requests.size()), op.requests.data(), MPI_STATUSES_IGNORE);
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Operation>> queue_;
  bool stopping_ = false;
  int world_rank_ = 0, world_size_ = 1;
  std::thread thread_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name, bool owned)
      : comm_(comm), name_(std::move(name)), owned_(owned) {
    Runtime::instance().run([&] {
      MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
      MPI_Comm_rank(comm_, &rank_);
      MPI_Comm_size(comm_, &size_);
    });
  }
  ~MpiCommunicator() override {
    if (!owned_) return;
    MPI_Comm comm = comm_;
    try {
      Runtime::instance().run([comm]() mutable { MPI_Comm_free(&comm); });
    } catch (...) {
      // At shutdown MPI may already be finalised; the communicator dies with it.
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  bool equal_counts_only() const override { return equal_counts_only_flag.load(); }

  Request iall_reduce(void* data, int64_t count, DType type, ReduceOp op) override {
    refuse_reduction(type, "all_reduce");
    std::vector<Piece> parts = pieces(count, "all_reduce");
    account(count * static_cast<int64_t>(dtype_size(type)));
    MPI_Comm comm = comm_;
    return submit([=, parts = std::move(parts)](Operation& o) {
      for (const Piece& p : parts) {
        o.requests.emplace_back();
        check(MPI_Iallreduce(MPI_IN_PLACE, byte_offset(data, p.offset, type), p.count,
                             mpi_type(type), mpi_op(op), comm, &o.requests.back()),
              "MPI_Iallreduce");
      }
    });
  }

  Request ireduce_scatter(const void* send, void* recv, std::span<const int64_t> recv_counts,
                          DType type, ReduceOp op) override {
    refuse_reduction(type, "reduce_scatter");
    check_counts(recv_counts, "reduce_scatter");
    check_equal_counts(recv_counts, "reduce_scatter");
    int64_t sent = 0;
    for (int64_t c : recv_counts) sent += c;
    account(sent * static_cast<int64_t>(dtype_size(type)));
    MPI_Comm comm = comm_;
    if (!fits_one_call(recv_counts)) {
      // One reduce per destination block, each in pieces (same calls on every rank).
      const std::vector<int64_t> offsets = offsets_of(recv_counts);
      std::vector<int64_t> counts(recv_counts.begin(), recv_counts.end());
      const int me = rank_;
      return submit([=](Operation& o) {
        for (int root = 0; root < static_cast<int>(counts.size()); ++root)
          for (const Piece& p : pieces(counts[static_cast<size_t>(root)], "reduce_scatter")) {
            o.requests.emplace_back();
            check(
                MPI_Ireduce(byte_offset(send, offsets[static_cast<size_t>(root)] + p.offset, type),
                            root == me ? byte_offset(recv, p.offset, type) : nullptr, p.count,
                            mpi_type(type), mpi_op(op), root, comm, &o.requests.back()),
                "MPI_Ireduce");
          }
      });
    }
    std::vector<int> counts = to_ints(recv_counts, "reduce_scatter");
    return submit([=, counts = std::move(counts)](Operation& o) mutable {
      o.counts_a = std::move(counts);
      o.requests.resize(1);
      check(MPI_Ireduce_scatter(send, recv, o.counts_a.data(), mpi_type(type), mpi_op(op), comm,
                                &o.requests[0]),
            "MPI_Ireduce_scatter");
    });
  }

  Request iall_gather(const void* send, void* recv, std::span<const int64_t> counts,
                      DType type) override {
    check_counts(counts, "all_gather");
    check_equal_counts(counts, "all_gather");
    if (!fits_one_call(counts)) {
      // Every rank broadcasts its block in pieces from its place in recv.
      const std::vector<int64_t> offsets = offsets_of(counts);
      std::vector<int64_t> c(counts.begin(), counts.end());
      const auto mine = static_cast<size_t>(rank_);
      void* own = byte_offset(recv, offsets[mine], type);
      if (own != send) std::memmove(own, send, static_cast<size_t>(c[mine]) * dtype_size(type));
      account(c[mine] * static_cast<int64_t>(dtype_size(type)) * (size_ - 1));
      MPI_Comm comm = comm_;
      return submit([=](Operation& o) {
        for (int root = 0; root < static_cast<int>(c.size()); ++root)
          for (const Piece& p : pieces(c[static_cast<size_t>(root)], "all_gather")) {
            o.requests.emplace_back();
            check(MPI_Ibcast(byte_offset(recv, offsets[static_cast<size_t>(root)] + p.offset, type),
                             p.count, mpi_type(type), root, comm, &o.requests.back()),
                  "MPI_Ibcast");
          }
      });
    }
    std::vector<int> c = to_ints(counts, "all_gather");
    std::vector<int> displs = displacements(c, "all_gather");
    account(static_cast<int64_t>(c[static_cast<size_t>(rank_)]) *
            static_cast<int64_t>(dtype_size(type)) * (size_ - 1));
    MPI_Comm comm = comm_;
    const int mine = c[static_cast<size_t>(rank_)];
    return submit([=, c = std::move(c), displs = std::move(displs)](Operation& o) mutable {
      o.counts_a = std::move(c);
      o.displs_a = std::move(displs);
      o.requests.resize(1);
      check(MPI_Iallgatherv(send, mine, mpi_type(type), recv, o.counts_a.data(), o.displs_a.data(),
                            mpi_type(type), comm, &o.requests[0]),
            "MPI_Iallgatherv");
    });
  }

  Request iall_to_all(const void* send, std::span<const int64_t> send_counts, void* recv,
                      std::span<const int64_t> recv_counts, DType type) override {
    check_counts(send_counts, "all_to_all send");
    check_counts(recv_counts, "all_to_all recv");
    if (!fits_one_call(send_counts) || !fits_one_call(recv_counts)) {
      // Point-to-point pieces under a reserved tag (MPI keeps their order per
      // sender, receiver and tag); the own block is a copy.
      const std::vector<int64_t> so = offsets_of(send_counts), ro = offsets_of(recv_counts);
      std::vector<int64_t> sc(send_counts.begin(), send_counts.end()),
          rc(recv_counts.begin(), recv_counts.end());
      const auto me = static_cast<size_t>(rank_);
      if (sc[me] != rc[me])
        throw Error("all_to_all: this rank sends itself " + std::to_string(sc[me]) +
                    " values but expects " + std::to_string(rc[me]));
      std::memmove(byte_offset(recv, ro[me], type), byte_offset(send, so[me], type),
                   static_cast<size_t>(sc[me]) * dtype_size(type));
      int64_t remote = 0;
      for (size_t d = 0; d < sc.size(); ++d)
        if (d != me) remote += sc[d];
      account(remote * static_cast<int64_t>(dtype_size(type)));
      MPI_Comm comm = comm_;
      return submit([=](Operation& o) {
        for (size_t peer = 0; peer < sc.size(); ++peer) {
          if (peer == me) continue;
          for (const Piece& p : pieces(rc[peer], "all_to_all recv")) {
            o.requests.emplace_back();
            check(MPI_Irecv(byte_offset(recv, ro[peer] + p.offset, type), p.count, mpi_type(type),
                            static_cast<int>(peer), kSplitAllToAllTag, comm, &o.requests.back()),
                  "MPI_Irecv");
          }
          for (const Piece& p : pieces(sc[peer], "all_to_all send")) {
            o.requests.emplace_back();
            check(MPI_Isend(byte_offset(send, so[peer] + p.offset, type), p.count, mpi_type(type),
                            static_cast<int>(peer), kSplitAllToAllTag, comm, &o.requests.back()),
                  "MPI_Isend");
          }
        }
      });
    }
    std::vector<int> sc = to_ints(send_counts, "all_to_all send"),
                     rc = to_ints(recv_counts, "all_to_all recv");
    std::vector<int> sd = displacements(sc, "all_to_all send"),
                     rd = displacements(rc, "all_to_all recv");
    int64_t remote = 0;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) remote += sc[static_cast<size_t>(r)];
    account(remote * static_cast<int64_t>(dtype_size(type)));
    MPI_Comm comm = comm_;
    return submit([=, sc = std::move(sc), rc = std::move(rc), sd = std::move(sd),
                   rd = std::move(rd)](Operation& o) mutable {
      o.counts_a = std::move(sc);
      o.displs_a = std::move(sd);
      o.counts_b = std::move(rc);
      o.displs_b = std::move(rd);
      o.requests.resize(1);
      check(MPI_Ialltoallv(send, o.counts_a.data(), o.displs_a.data(), mpi_type(type), recv,
                           o.counts_b.data(), o.displs_b.data(), mpi_type(type), comm,
                           &o.requests[0]),
            "MPI_Ialltoallv");
    });
  }

  Request ibroadcast(void* data, int64_t count, DType type, int root) override {
    check_peer(root, "broadcast root");
    std::vector<Piece> parts = pieces(count, "broadcast");
    if (rank_ == root) account(count * static_cast<int64_t>(dtype_size(type)));
    MPI_Comm comm = comm_;
    return submit([=, parts = std::move(parts)](Operation& o) {
      for (const Piece& p : parts) {
        o.requests.emplace_back();
        check(MPI_Ibcast(byte_offset(data, p.offset, type), p.count, mpi_type(type), root, comm,
                         &o.requests.back()),
              "MPI_Ibcast");
      }
    });
  }

  // A message over the limit travels as several with the same tag; MPI keeps
  // their order, so the receiver's pieces match the sender's.
  Request isend(const void* data, int64_t count, DType type, int dest, int tag) override {
    check_peer(dest, "send destination");
    check_tag(tag);
    std::vector<Piece> parts = pieces(count, "send");
    if (dest != rank_) account(count * static_cast<int64_t>(dtype_size(type)));
    MPI_Comm comm = comm_;
    return submit([=, parts = std::move(parts)](Operation& o) {
      for (const Piece& p : parts) {
        o.requests.emplace_back();
        check(MPI_Isend(byte_offset(data, p.offset, type), p.count, mpi_type(type), dest, tag, comm,
                        &o.requests.back()),
              "MPI_Isend");
      }
    });
  }

  Request irecv(void* data, int64_t count, DType type, int source, int tag) override {
    check_peer(source, "recv source");
    check_tag(tag);
    std::vector<Piece> parts = pieces(count, "recv");
    ++stats_.operations;
    MPI_Comm comm = comm_;
    return submit([=, parts = std::move(parts)](Operation& o) {
      for (const Piece& p : parts) {
        o.requests.emplace_back();
        check(MPI_Irecv(byte_offset(data, p.offset, type), p.count, mpi_type(type), source, tag,
                        comm, &o.requests.back()),
              "MPI_Irecv");
      }
    });
  }

  Request ibarrier() override {
    ++stats_.operations;
    MPI_Comm comm = comm_;
    return submit([=](Operation& o) {
      o.requests.resize(1);
      check(MPI_Ibarrier(comm, &o.requests[0]), "MPI_Ibarrier");
    });
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    if (color < 0) throw Error("split: color must be >= 0");
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm comm = comm_;
    Runtime::instance().run(
        [&] { check(MPI_Comm_split(comm, color, key, &sub), "MPI_Comm_split"); });
    return std::make_unique<MpiCommunicator>(sub, name, true);
  }

 private:
  Request submit(std::function<void(Operation&)> start) {
    return Request(Runtime::instance().submit(std::move(start), &stats_));
  }
  void account(int64_t bytes) {
    ++stats_.operations;
    stats_.bytes_sent += bytes;
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_)
      throw Error(std::string(what) + " " + std::to_string(peer) + " outside communicator '" +
                  name_ + "' of " + std::to_string(size_) + " ranks");
  }
  static void check_tag(int tag) {
    if (tag < 0 || tag == kSplitAllToAllTag)
      throw Error("message tag " + std::to_string(tag) + " is negative or reserved (" +
                  std::to_string(kSplitAllToAllTag) + ": split all-to-all)");
  }
  void check_counts(std::span<const int64_t> counts, const char* what) const {
    if (static_cast<int>(counts.size()) != size_)
      throw Error(std::string(what) + ": expected " + std::to_string(size_) + " counts, got " +
                  std::to_string(counts.size()));
    for (int64_t c : counts)
      if (c < 0) throw Error(std::string(what) + ": negative element count " + std::to_string(c));
  }
  // Reduce-scatter and all-gather under equal_counts_only().
  void check_equal_counts(std::span<const int64_t> counts, const char* what) const {
    if (!equal_counts_only()) return;
    for (int64_t c : counts)
      if (c != counts.front())
        throw Error(std::string(what) + " on '" + name_ +
                    "' takes one count for every rank (equal-count collectives), got " +
                    std::to_string(counts.front()) + " and " + std::to_string(c));
  }
  // Counts already checked by check_counts and within one call's limit.
  static std::vector<int> to_ints(std::span<const int64_t> counts, const char* what) {
    std::vector<int> out(counts.size());
    for (size_t i = 0; i < counts.size(); ++i) out[i] = mpi_count(counts[i], what);
    return out;
  }
  static std::vector<int> displacements(const std::vector<int>& counts, const char* what) {
    std::vector<int> out(counts.size());
    int64_t at = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      out[i] = mpi_count(at, what);
      at += counts[i];
    }
    mpi_count(at, what);
    return out;
  }

  MPI_Comm comm_;
  std::string name_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

void set_mpi_equal_counts_only(bool on) {
  equal_counts_only_flag.store(on);
}

void set_mpi_message_limit(int64_t elements) {
  if (elements < 1 || elements > INT_MAX)
    throw Error("MPI message limit must be in [1, INT_MAX], got " + std::to_string(elements));
  message_limit.store(elements, std::memory_order_relaxed);
}

std::shared_ptr<Communicator> mpi_world() {
  static std::shared_ptr<Communicator> world = [] {
    Runtime::instance();
    return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, "world", false);
  }();
  return world;
}

void abort_world(int code) {
  int initialized = 0;
  MPI_Initialized(&initialized);  // callable from any thread, before MPI_Init too
  // Called on a failing rank so the others do not wait forever in a collective.
  // MPI_Abort is the one call made off the progress thread: the process ends.
  if (launched_by_mpi() && initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace trex::parallel
