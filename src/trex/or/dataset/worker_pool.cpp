#include "trex/or/dataset/worker_pool.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "trex/core/error.hpp"

namespace trex::orlib {
namespace {

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
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

struct Worker {
  pid_t pid = -1;
  int task_fd = -1;
  int result_fd = -1;
  bool busy = false;
  PoolJob job;
};

class Pool {
 public:
  Pool(int jobs, const std::function<std::string(const PoolJob&)>& work) : work_(work) {
    signal(SIGPIPE, SIG_IGN);
    workers_.resize(static_cast<size_t>(jobs));
    for (auto& w : workers_) start(w);
  }
  ~Pool() {
    for (auto& w : workers_) stop(w);
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  std::vector<Worker>& workers() { return workers_; }

  // false when the worker died while receiving the job.
  bool submit(Worker& w, const PoolJob& job) {
    w.busy = true;
    w.job = job;
    return write_all(w.task_fd, &job, sizeof job);
  }

  // Replaces a dead worker; returns the job it was on.
  PoolJob restart(Worker& w) {
    PoolJob job = w.job;
    stop(w, true);
    start(w);
    return job;
  }

  // Reads one result from a worker whose result pipe is readable.
  bool receive(Worker& w, std::string& result) {
    uint64_t size = 0;
    if (!read_all(w.result_fd, &size, sizeof size)) return false;
    result.resize(size);
    if (!read_all(w.result_fd, result.data(), size)) return false;
    w.busy = false;
    return true;
  }

 private:
  [[noreturn]] void worker_main(int task_fd, int result_fd) {
    PoolJob job;
    while (read_all(task_fd, &job, sizeof job)) {
      std::string result;
      try {
        result = work_(job);
      } catch (const std::exception& e) {
        result = std::string("!internal_error: ") + e.what();
      }
      uint64_t size = result.size();
      if (!write_all(result_fd, &size, sizeof size) ||
          !write_all(result_fd, result.data(), result.size()))
        break;
    }
    _exit(0);
  }

  void start(Worker& w) {
    int task_pipe[2], result_pipe[2];
    if (pipe(task_pipe) != 0 || pipe(result_pipe) != 0)
      throw Error(std::string("pipe failed: ") + std::strerror(errno));
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) throw Error(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      ::close(task_pipe[1]);
      ::close(result_pipe[0]);
      for (auto& other : workers_) {
        if (other.task_fd >= 0) ::close(other.task_fd);
        if (other.result_fd >= 0) ::close(other.result_fd);
      }
      worker_main(task_pipe[0], result_pipe[1]);
    }
    ::close(task_pipe[0]);
    ::close(result_pipe[1]);
    w.pid = pid;
    w.task_fd = task_pipe[1];
    w.result_fd = result_pipe[0];
    w.busy = false;
  }

  void stop(Worker& w, bool force = false) {
    if (w.task_fd >= 0) ::close(w.task_fd);
    if (w.result_fd >= 0) ::close(w.result_fd);
    w.task_fd = w.result_fd = -1;
    if (w.pid > 0) {
      int status = 0;
      if (force || w.busy) kill(w.pid, SIGKILL);
      waitpid(w.pid, &status, 0);
    }
    w.pid = -1;
    w.busy = false;
  }

  const std::function<std::string(const PoolJob&)>& work_;
  std::vector<Worker> workers_;
};

}  // namespace

void run_worker_pool(int jobs, const std::function<std::optional<PoolJob>()>& next,
                     const std::function<std::string(const PoolJob&)>& work,
                     const std::function<void(const PoolJob&, std::string, bool)>& done) {
  if (jobs <= 0) {
    while (auto job = next()) {
      std::string result;
      try {
        result = work(*job);
      } catch (const std::exception& e) {
        result = std::string("!internal_error: ") + e.what();
      }
      done(*job, std::move(result), false);
    }
    return;
  }
  Pool pool(jobs, work);
  while (true) {
    bool any_busy = false;
    for (auto& w : pool.workers()) {
      if (!w.busy) {
        auto job = next();
        if (job && !pool.submit(w, *job)) done(pool.restart(w), {}, true);
      }
      any_busy = any_busy || w.busy;
    }
    if (!any_busy) return;
    std::vector<pollfd> fds;
    std::vector<Worker*> owner;
    for (auto& w : pool.workers()) {
      if (!w.busy) continue;
      fds.push_back({w.result_fd, POLLIN, 0});
      owner.push_back(&w);
    }
    int rc;
    do rc = poll(fds.data(), fds.size(), -1);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) throw Error(std::string("poll failed: ") + std::strerror(errno));
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Worker& w = *owner[k];
      std::string result;
      PoolJob job = w.job;
      if (pool.receive(w, result)) {
        done(job, std::move(result), false);
      } else {
        pool.restart(w);
        done(job, {}, true);
      }
    }
  }
}

}  // namespace trex::orlib
