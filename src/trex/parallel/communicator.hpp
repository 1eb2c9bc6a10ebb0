#pragma once
// The communication layer of distributed training (docs/distributed.md): the
// collectives and point-to-point transfers the DP / EP / PP code needs, each in
// a non-blocking form that returns a Request and a blocking form (start + wait).
//
// Ordering rule (as in MPI): every rank of a communicator starts its
// collectives in the same order; buffers stay alive and untouched until the
// request completes. Operations on one communicator are started in program
// order. The MPI implementation runs every MPI call on one communication
// progress thread, so a request started before a compute phase makes progress
// while that phase runs (computation-communication overlap), and the caller's
// threads never enter MPI.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace trex::parallel {

// kBF16 moves 16-bit values as they are (gathers, broadcasts, point to
// point); no reduction takes it (gradients reduce in fp32).
enum class DType { kF32, kF64, kI64, kI32, kU8, kBF16 };
size_t dtype_size(DType type);
const char* dtype_name(DType type);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::kU8;
}

enum class ReduceOp { kSum, kMax, kMin };

namespace detail {
// Completion state shared by a Request and the implementation that completes it.
struct Pending;
}  // namespace detail

// Handle of a started operation. A default-constructed Request is complete.
// wait() blocks until completion and rethrows a failure of the operation as
// trex::Error; the time spent blocked is charged to the communicator's
// exposed-communication counter.
class Request {
 public:
  Request() = default;
  explicit Request(std::shared_ptr<detail::Pending> pending) : pending_(std::move(pending)) {}
  void wait();
  bool done() const;  // non-blocking completion test

 private:
  std::shared_ptr<detail::Pending> pending_;
};

// Waits for every request (in order).
void wait_all(std::span<Request> requests);

// Counters of one communicator (and of sub-communicators split from it, which
// have their own).
struct CommStats {
  double exposed_seconds = 0.0;  // time callers spent blocked in Request::wait()
  int64_t operations = 0;
  int64_t bytes_sent = 0;  // payload this rank handed to the network (self-copies excluded)
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "world", "dp", "ep", "pp", ...

  // In place: data[count] becomes the reduction over ranks.
  virtual Request iall_reduce(void* data, int64_t count, DType type, ReduceOp op) = 0;
  // send holds Σ recv_counts elements, rank-major; rank r receives the
  // reduction of block r (recv_counts[r] elements) into recv.
  virtual Request ireduce_scatter(const void* send, void* recv,
                                  std::span<const int64_t> recv_counts, DType type,
                                  ReduceOp op) = 0;
  // True where reduce-scatter and all-gather take one count for every rank
  // (NCCL's model): callers then pad each rank's block to the largest
  // (parallel/padded_collectives.hpp) and the implementation refuses unequal
  // counts. MPI takes per-rank counts (set_mpi_equal_counts_only tests the
  // padded path on it).
  virtual bool equal_counts_only() const { return false; }
  // Rank r contributes counts[r] elements from send; recv receives every
  // rank's block, rank-major (Σ counts elements).
  virtual Request iall_gather(const void* send, void* recv, std::span<const int64_t> counts,
                              DType type) = 0;
  // send holds send_counts[r] elements for each rank r, rank-major; recv
  // receives recv_counts[r] elements from each rank r, rank-major.
  virtual Request iall_to_all(const void* send, std::span<const int64_t> send_counts, void* recv,
                              std::span<const int64_t> recv_counts, DType type) = 0;
  virtual Request ibroadcast(void* data, int64_t count, DType type, int root) = 0;
  virtual Request isend(const void* data, int64_t count, DType type, int dest, int tag) = 0;
  virtual Request irecv(void* data, int64_t count, DType type, int source, int tag) = 0;
  virtual Request ibarrier() = 0;

  // Ranks that pass the same color form one sub-communicator, ordered by key
  // (then by rank here). Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  // Blocking forms.
  void all_reduce(void* data, int64_t count, DType type, ReduceOp op) {
    iall_reduce(data, count, type, op).wait();
  }
  void reduce_scatter(const void* send, void* recv, std::span<const int64_t> recv_counts,
                      DType type, ReduceOp op) {
    ireduce_scatter(send, recv, recv_counts, type, op).wait();
  }
  void all_gather(const void* send, void* recv, std::span<const int64_t> counts, DType type) {
    iall_gather(send, recv, counts, type).wait();
  }
  void all_to_all(const void* send, std::span<const int64_t> send_counts, void* recv,
                  std::span<const int64_t> recv_counts, DType type) {
    iall_to_all(send, send_counts, recv, recv_counts, type).wait();
  }
  void broadcast(void* data, int64_t count, DType type, int root) {
    ibroadcast(data, count, type, root).wait();
  }
  void send(const void* data, int64_t count, DType type, int dest, int tag) {
    isend(data, count, type, dest, tag).wait();
  }
  void recv(void* data, int64_t count, DType type, int source, int tag) {
    irecv(data, count, type, source, tag).wait();
  }
  void barrier() { ibarrier().wait(); }

  // Typed conveniences.
  template <class T>
  void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::kSum) {
    all_reduce(data.data(), static_cast<int64_t>(data.size()), dtype_of<T>(), op);
  }
  template <class T>
  T all_reduce_value(T value, ReduceOp op = ReduceOp::kSum) {
    all_reduce(&value, 1, dtype_of<T>(), op);
    return value;
  }

  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }

 protected:
  CommStats stats_;
};

// One rank, no MPI: collectives are copies; send/recv to self are matched by tag.
std::unique_ptr<Communicator> make_self_communicator(const std::string& name = "self");

// True when this process was started by mpirun / mpiexec (Open MPI, MPICH or
// PMIx environment), i.e. when mpi_world() will see more than this process.
bool launched_by_mpi();

// MPI_COMM_WORLD. The first call starts the communication progress thread,
// which initialises MPI (MPI_THREAD_FUNNELED: only that thread calls MPI);
// MPI is finalised at process exit. Throws trex::Error when MPI cannot start.
std::shared_ptr<Communicator> mpi_world();

// Elements per MPI call (default and maximum INT_MAX, MPI's count type): a
// buffer over it travels as several calls, so no operation is limited by MPI's
// int counts. Lower values exist to test that path.
void set_mpi_message_limit(int64_t elements);

// MPI communicators behave like NCCL's for reduce-scatter and all-gather:
// equal_counts_only() is true and unequal counts are refused (tests of the
// padded path; default false).
void set_mpi_equal_counts_only(bool on);

// The world of this process: mpi_world() under mpirun, else a 1-rank communicator.
std::shared_ptr<Communicator> world();

// Ends every rank (MPI_Abort under mpirun, exit otherwise): a rank that fails
// must not leave its peers waiting in a collective forever.
[[noreturn]] void abort_world(int code);

}  // namespace trex::parallel
