#include "trex/core/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <exception>

namespace trex {

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::loop() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_ && tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop();
    }
    task();
  }
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  const int64_t chunks = std::min<int64_t>(n, static_cast<int64_t>(size()) * 4);
  std::atomic<int64_t> remaining{chunks};
  std::exception_ptr error;
  std::mutex done_mutex;
  std::condition_variable done;
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t lo = begin + n * c / chunks, hi = begin + n * (c + 1) / chunks;
    auto task = [&, lo, hi] {
      try {
        for (int64_t i = lo; i < hi; ++i) fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(done_mutex);
        if (!error) error = std::current_exception();
      }
      if (remaining.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(done_mutex);
        done.notify_all();
      }
    };
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push(std::move(task));
    }
    wake_.notify_one();
  }
  std::unique_lock<std::mutex> lock(done_mutex);
  done.wait(lock, [&] { return remaining.load() == 0; });
  if (error) std::rethrow_exception(error);
}

}  // namespace trex
