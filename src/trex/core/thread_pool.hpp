#pragma once
// A fixed-size thread pool with a blocking parallel_for. Used where work is
// CPU-bound and thread-safe; tasks that touch GLPK/CBC use worker processes
// instead (see core/process_pool).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace trex {

class ThreadPool {
 public:
  // threads == 0 means one per hardware thread.
  explicit ThreadPool(unsigned threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()); }

  // Runs fn(i) for i in [begin, end), split into contiguous chunks, and waits.
  // The first exception thrown by any call is rethrown here.
  void parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t)>& fn);

 private:
  void loop();

  std::vector<std::thread> workers_;
  std::queue<std::function<void()>> tasks_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
};

}  // namespace trex
