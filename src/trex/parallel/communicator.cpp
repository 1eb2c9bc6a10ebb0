#include "trex/parallel/communicator.hpp"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>

#include "trex/core/error.hpp"
#include "trex/parallel/pending.hpp"

namespace trex::parallel {

size_t dtype_size(DType type) {
  switch (type) {
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
    case DType::kI64:
      return 8;
    case DType::kI32:
      return 4;
    case DType::kU8:
      return 1;
    case DType::kBF16:
      return 2;
  }
  throw Error("unknown communication data type");
}

const char* dtype_name(DType type) {
  switch (type) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kI64:
      return "i64";
    case DType::kI32:
      return "i32";
    case DType::kU8:
      return "u8";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

namespace detail {

void Pending::complete(std::string failure) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    error = std::move(failure);
    finished = true;
  }
  ready.notify_all();
}

}  // namespace detail

void Request::wait() {
  if (!pending_) return;
  detail::Pending& p = *pending_;
  std::unique_lock<std::mutex> lock(p.mutex);
  if (!p.finished) {
    const auto start = std::chrono::steady_clock::now();
    p.ready.wait(lock, [&] { return p.finished; });
    if (p.stats)
      p.stats->exposed_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (!p.error.empty()) {
    const std::string message = p.error;
    p.error.clear();  // report once
    throw Error(message);
  }
}

bool Request::done() const {
  if (!pending_) return true;
  std::lock_guard<std::mutex> lock(pending_->mutex);
  return pending_->finished;
}

void wait_all(std::span<Request> requests) {
  for (Request& r : requests) r.wait();
}

namespace {

int64_t total(std::span<const int64_t> counts) {
  int64_t sum = 0;
  for (int64_t c : counts) {
    if (c < 0) throw Error("negative element count in a collective");
    sum += c;
  }
  return sum;
}

void check_counts(std::span<const int64_t> counts, int size, const char* what) {
  if (static_cast<int>(counts.size()) != size)
    throw Error(std::string(what) + ": expected " + std::to_string(size) + " counts, got " +
                std::to_string(counts.size()));
  total(counts);
}

// One process, one rank: collectives are copies, send/recv to self are matched
// by tag in posting order (MPI's non-overtaking rule).
class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  Request iall_reduce(void*, int64_t count, DType, ReduceOp) override {
    if (count < 0) throw Error("all_reduce: negative count");
    ++stats_.operations;
    return {};
  }
  Request ireduce_scatter(const void* send, void* recv, std::span<const int64_t> recv_counts,
                          DType type, ReduceOp) override {
    check_counts(recv_counts, 1, "reduce_scatter");
    copy(send, recv, recv_counts[0], type);
    return {};
  }
  Request iall_gather(const void* send, void* recv, std::span<const int64_t> counts,
                      DType type) override {
    check_counts(counts, 1, "all_gather");
    copy(send, recv, counts[0], type);
    return {};
  }
  Request iall_to_all(const void* send, std::span<const int64_t> send_counts, void* recv,
                      std::span<const int64_t> recv_counts, DType type) override {
    check_counts(send_counts, 1, "all_to_all");
    check_counts(recv_counts, 1, "all_to_all");
    if (send_counts[0] != recv_counts[0])
      throw Error("all_to_all: a 1-rank communicator must send and receive the same count");
    copy(send, recv, send_counts[0], type);
    return {};
  }
  Request ibroadcast(void*, int64_t count, DType, int root) override {
    if (root != 0 || count < 0) throw Error("broadcast: root must be 0 on a 1-rank communicator");
    ++stats_.operations;
    return {};
  }
  Request isend(const void* data, int64_t count, DType type, int dest, int tag) override {
    if (dest != 0) throw Error("send: destination " + std::to_string(dest) + " out of range");
    ++stats_.operations;
    const size_t bytes = static_cast<size_t>(count) * dtype_size(type);
    auto& waiting = receives_[tag];
    if (!waiting.empty()) {
      PostedReceive r = waiting.front();
      waiting.pop_front();
      if (r.bytes != bytes)
        fail_size(r.pending, r.bytes, bytes);
      else {
        std::memcpy(r.data, data, bytes);
        r.pending->complete();
      }
      return {};
    }
    const auto* bytes_in = static_cast<const unsigned char*>(data);
    sends_[tag].emplace_back(bytes_in, bytes_in + bytes);
    return {};
  }
  Request irecv(void* data, int64_t count, DType type, int source, int tag) override {
    if (source != 0) throw Error("recv: source " + std::to_string(source) + " out of range");
    ++stats_.operations;
    const size_t bytes = static_cast<size_t>(count) * dtype_size(type);
    auto& sent = sends_[tag];
    auto pending = std::make_shared<detail::Pending>();
    pending->stats = &stats_;
    if (!sent.empty()) {
      std::vector<unsigned char> message = std::move(sent.front());
      sent.pop_front();
      if (message.size() != bytes)
        fail_size(pending, bytes, message.size());
      else {
        if (bytes) std::memcpy(data, message.data(), bytes);
        pending->complete();
      }
      return Request(pending);
    }
    receives_[tag].push_back({data, bytes, pending});
    return Request(pending);
  }
  Request ibarrier() override {
    ++stats_.operations;
    return {};
  }
  std::unique_ptr<Communicator> split(int, int, const std::string& name) override {
    return std::make_unique<SelfCommunicator>(name);
  }

 private:
  struct PostedReceive {
    void* data;
    size_t bytes;
    std::shared_ptr<detail::Pending> pending;
  };

  void copy(const void* send, void* recv, int64_t count, DType type) {
    ++stats_.operations;
    const size_t bytes = static_cast<size_t>(count) * dtype_size(type);
    if (bytes && send != recv) std::memmove(recv, send, bytes);
  }
  static void fail_size(const std::shared_ptr<detail::Pending>& p, size_t expected, size_t got) {
    p->complete("recv: message of " + std::to_string(got) + " bytes, receive buffer of " +
                std::to_string(expected));
  }

  std::string name_;
  std::map<int, std::deque<std::vector<unsigned char>>> sends_;
  std::map<int, std::deque<PostedReceive>> receives_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

std::shared_ptr<Communicator> world() {
  if (launched_by_mpi()) return mpi_world();
  static std::shared_ptr<Communicator> self = make_self_communicator("world");
  return self;
}

}  // namespace trex::parallel
