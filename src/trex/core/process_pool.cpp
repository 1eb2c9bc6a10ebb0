#include "trex/core/process_pool.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex {
namespace {

// Response frame: status byte, payload size, payload.
constexpr uint8_t kReturned = 0;
constexpr uint8_t kThrew = 1;
constexpr size_t kResponseHeader = sizeof(uint8_t) + sizeof(uint64_t);

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    // MSG_NOSIGNAL: a worker that died is seen as EOF on its socket, not as SIGPIPE here.
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void set_limit(int resource, rlim_t soft, rlim_t hard) {
  rlimit rl{soft, hard};
  setrlimit(resource, &rl);
}

PoolResult run_here(const ProcessPool::Work& work, const PoolItem& item) {
  PoolResult r;
  try {
    r.response = work(0, item);
  } catch (const std::exception& e) {
    r.status = PoolStatus::failed;
    r.error = e.what();
  }
  return r;
}

}  // namespace

void apply_process_limits(const ProcessLimits& limits) {
  if (limits.cpu_seconds) {
    const rlim_t cpu = static_cast<rlim_t>(std::ceil(*limits.cpu_seconds));
    set_limit(RLIMIT_CPU, cpu, cpu + 1);
  }
  if (limits.address_space_bytes)
    set_limit(RLIMIT_AS, *limits.address_space_bytes, *limits.address_space_bytes);
  if (limits.file_size_bytes)
    set_limit(RLIMIT_FSIZE, *limits.file_size_bytes, *limits.file_size_bytes);
  if (limits.open_files) set_limit(RLIMIT_NOFILE, *limits.open_files, *limits.open_files);
  if (!limits.core_dumps) set_limit(RLIMIT_CORE, 0, 0);
  if (limits.processes) set_limit(RLIMIT_NPROC, *limits.processes, *limits.processes);
}

const char* to_string(PoolStatus status) {
  switch (status) {
    case PoolStatus::ok:
      return "ok";
    case PoolStatus::failed:
      return "failed";
    case PoolStatus::crashed:
      return "crashed";
    case PoolStatus::timed_out:
      return "timed_out";
  }
  return "crashed";
}

struct ProcessPool::Slot {
  int index = 0;
  pid_t pid = -1;
  int fd = -1;  // this process's end of the worker's socket
  bool busy = false;
  PoolItem item;
  uint64_t sequence = 0;  // the order next() gave the item in
  double deadline = 0.0;  // 0: none
  std::string inbox;      // response bytes received so far
  bool eof = false;
};

ProcessPool::ProcessPool(ProcessPoolOptions options, Work work)
    : options_(std::move(options)), work_(std::move(work)) {
  options_.workers = std::max(0, options_.workers);
  slots_.resize(static_cast<size_t>(options_.workers));
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].index = static_cast<int>(i);
}

ProcessPool::~ProcessPool() {
  for (auto& s : slots_) end_worker(s, s.busy, nullptr);
}

void ProcessPool::start_worker(Slot& slot, const PoolItem* only_item) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error(std::string("socketpair failed: ") + std::strerror(errno));
  std::fflush(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(sv[0]);
    ::close(sv[1]);
    throw Error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(sv[0]);
    for (auto& other : slots_)  // do not hold siblings' sockets open
      if (other.fd >= 0) ::close(other.fd);
    // A worker never outlives the process that started it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    apply_process_limits(options_.limits);
    worker_main(slot.index, sv[1], only_item);
  }
  ::close(sv[1]);
  slot.pid = pid;
  slot.fd = sv[0];
}

void ProcessPool::worker_main(int slot, int fd, const PoolItem* only_item) {
  auto answer = [&](const PoolItem& item) {
    uint8_t status = kReturned;
    std::string payload;
    try {
      payload = work_(slot, item);
    } catch (const std::exception& e) {
      status = kThrew;
      payload = e.what();
    }
    std::string frame = MessageWriter().put(status).put(payload).take();
    return write_all(fd, frame.data(), frame.size());
  };
  if (only_item != nullptr) {
    answer(*only_item);
    _exit(0);
  }
  while (true) {
    PoolItem item;
    uint64_t size = 0;
    if (!read_all(fd, &item.id, sizeof item.id) ||
        !read_all(fd, &item.attempt, sizeof item.attempt) || !read_all(fd, &size, sizeof size))
      break;
    item.request.resize(size);
    if (!read_all(fd, item.request.data(), size) || !answer(item)) break;
  }
  _exit(0);
}

void ProcessPool::dispatch(Slot& slot, PoolItem&& item, uint64_t sequence) {
  slot.busy = true;
  slot.item = std::move(item);
  slot.sequence = sequence;
  slot.inbox.clear();
  slot.eof = false;
  const double timeout =
      slot.item.timeout_seconds > 0 ? slot.item.timeout_seconds : options_.item_timeout_seconds;
  slot.deadline = timeout > 0 ? now_seconds() + timeout : 0.0;
  if (options_.process_per_item) {
    start_worker(slot, &slot.item);
    return;
  }
  if (slot.pid < 0) start_worker(slot, nullptr);
  std::string frame = MessageWriter()
                          .put(slot.item.id)
                          .put(slot.item.attempt)
                          .put(std::string_view(slot.item.request))
                          .take();
  // A worker that died is seen when its socket reports EOF.
  write_all(slot.fd, frame.data(), frame.size());
}

bool ProcessPool::receive(Slot& slot, PoolResult& result) {
  char buf[65536];
  while (!slot.eof) {
    ssize_t n = ::recv(slot.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      slot.inbox.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    slot.eof = true;
  }
  if (slot.inbox.size() >= kResponseHeader) {
    MessageReader header(slot.inbox);
    const uint8_t status = header.get<uint8_t>();
    const uint64_t size = header.get<uint64_t>();
    if (slot.inbox.size() - kResponseHeader >= size) {
      result = PoolResult{};
      if (status == kReturned) {
        result.response = slot.inbox.substr(kResponseHeader, size);
      } else {
        result.status = PoolStatus::failed;
        result.error = slot.inbox.substr(kResponseHeader, size);
      }
      slot.inbox.clear();
      slot.busy = false;
      // A worker for one item exits once it has answered.
      if (options_.process_per_item) end_worker(slot, false, nullptr);
      return true;
    }
  }
  if (!slot.eof) return false;
  result = crash_result(slot);
  return true;
}

void ProcessPool::end_worker(Slot& slot, bool kill_first, int* status) {
  if (slot.fd >= 0) ::close(slot.fd);
  slot.fd = -1;
  if (slot.pid > 0) {
    if (kill_first) kill(slot.pid, SIGKILL);
    int st = 0;
    while (waitpid(slot.pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (status != nullptr) *status = st;
  }
  slot.pid = -1;
  slot.busy = false;
}

PoolResult ProcessPool::crash_result(Slot& slot) {
  int status = 0;
  // The worker has closed its socket, so it is exiting or gone: its own status is kept.
  end_worker(slot, true, &status);
  PoolResult r;
  r.status = PoolStatus::crashed;
  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
    r.error = "worker killed by signal " + std::to_string(r.signal);
  } else {
    r.error = "worker exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return r;
}

void ProcessPool::abandon_running() {
  for (auto& s : slots_)
    if (s.busy) end_worker(s, true, nullptr);
}

void ProcessPool::run(const Next& next, const Done& done) {
  if (slots_.empty()) {
    while (auto item = next()) done(*item, run_here(work_, *item));
    return;
  }
  uint64_t next_sequence = 0, next_delivery = 0;
  std::map<uint64_t, std::pair<PoolItem, PoolResult>> held;  // in_order: ended, not yet delivered
  try {
    while (true) {
      for (auto& s : slots_) {
        if (s.busy) continue;
        auto item = next();
        if (!item) break;
        dispatch(s, std::move(*item), next_sequence++);
      }
      std::vector<pollfd> fds;
      std::vector<Slot*> owners;
      double now = now_seconds();
      double wait = -1.0;
      for (auto& s : slots_) {
        if (!s.busy) continue;
        fds.push_back({s.fd, POLLIN, 0});
        owners.push_back(&s);
        if (s.deadline > 0)
          wait = std::max(0.0, wait < 0 ? s.deadline - now : std::min(wait, s.deadline - now));
      }
      if (fds.empty()) return;
      const int timeout_ms = wait < 0 ? -1 : static_cast<int>(std::ceil(wait * 1000.0));
      int rc = poll(fds.data(), fds.size(), timeout_ms);
      if (rc < 0 && errno != EINTR)
        throw Error(std::string("poll failed: ") + std::strerror(errno));
      now = now_seconds();
      std::vector<std::pair<uint64_t, std::pair<PoolItem, PoolResult>>> ended;
      for (size_t k = 0; k < fds.size(); ++k) {
        Slot& s = *owners[k];
        PoolResult r;
        bool over = false;
        if (rc > 0 && fds[k].revents != 0) over = receive(s, r);
        if (!over && s.deadline > 0 && now >= s.deadline) {
          end_worker(s, true, nullptr);
          r = PoolResult{};
          r.status = PoolStatus::timed_out;
          const double limit =
              s.item.timeout_seconds > 0 ? s.item.timeout_seconds : options_.item_timeout_seconds;
          r.error = "timed out after " + format_number(limit) + " s";
          over = true;
        }
        if (over) ended.push_back({s.sequence, {std::move(s.item), std::move(r)}});
      }
      for (auto& [sequence, result] : ended) {
        if (!options_.in_order) {
          done(result.first, std::move(result.second));
          continue;
        }
        held.emplace(sequence, std::move(result));
      }
      for (auto it = held.begin(); it != held.end() && it->first == next_delivery;
           it = held.begin()) {
        auto [item, result] = std::move(it->second);
        held.erase(it);
        ++next_delivery;
        done(item, std::move(result));
      }
    }
  } catch (...) {
    abandon_running();
    throw;
  }
}

PoolResult ProcessPool::run_one(PoolItem item) {
  PoolResult out;
  bool given = false;
  run(
      [&]() -> std::optional<PoolItem> {
        if (given) return std::nullopt;
        given = true;
        return std::move(item);
      },
      [&](const PoolItem&, PoolResult&& r) { out = std::move(r); });
  return out;
}

MessageWriter& MessageWriter::put(std::string_view text) {
  put(static_cast<uint64_t>(text.size()));
  bytes_.append(text.data(), text.size());
  return *this;
}

std::string MessageReader::get_string() {
  const uint64_t size = get<uint64_t>();
  if (size > bytes_.size()) throw Error("truncated pool message");
  std::string out(bytes_.substr(0, size));
  bytes_.remove_prefix(size);
  return out;
}

void MessageReader::take(void* out, size_t size) {
  if (size > bytes_.size()) throw Error("truncated pool message");
  std::memcpy(out, bytes_.data(), size);
  bytes_.remove_prefix(size);
}

}  // namespace trex
