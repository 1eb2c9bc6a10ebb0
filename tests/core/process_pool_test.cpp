#include "trex/core/process_pool.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "trex/core/error.hpp"

namespace trex {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Items 0..n-1, each once.
ProcessPool::Next count_to(int64_t n, int64_t& next) {
  return [&next, n]() -> std::optional<PoolItem> {
    if (next >= n) return std::nullopt;
    PoolItem item;
    item.id = next++;
    return item;
  };
}

bool process_is_gone(pid_t pid) {
  return kill(pid, 0) != 0 && errno == ESRCH;
}

TEST(ProcessPool, InOrderDeliversInTheOrderItemsWereGiven) {
  ProcessPoolOptions options;
  options.workers = 3;
  // Earlier items take longer, so they end after later ones.
  ProcessPool pool(options, [](int, const PoolItem& item) {
    sleep_ms(static_cast<int>(12 - item.id) * 15);
    return "r" + std::to_string(item.id);
  });
  int64_t next = 0;
  std::vector<int64_t> order;
  pool.run(count_to(12, next), [&](const PoolItem& item, PoolResult&& r) {
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.response, "r" + std::to_string(item.id));
    order.push_back(item.id);
  });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(ProcessPool, AsCompletedDeliversAsItemsEnd) {
  ProcessPoolOptions options;
  options.workers = 2;
  options.in_order = false;
  ProcessPool pool(options, [](int, const PoolItem& item) {
    sleep_ms(item.id == 0 ? 600 : 1);
    return std::string();
  });
  int64_t next = 0;
  std::vector<int64_t> order;
  pool.run(count_to(4, next),
           [&](const PoolItem& item, PoolResult&&) { order.push_back(item.id); });
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order.back(), 0);  // the slow first item ends last
}

TEST(ProcessPool, ACrashCostsOnlyItsItemAndTheWorkerIsReplaced) {
  // One worker, so which worker runs which item does not depend on timing
  // (with two, a fast survivor could take every item after the crash).
  ProcessPoolOptions options;
  options.workers = 1;
  ProcessPool pool(options, [](int, const PoolItem& item) {
    if (item.id == 3) std::abort();
    return std::to_string(getpid());
  });
  int64_t next = 0;
  std::vector<std::string> pid_of(10);
  int ok = 0;
  pool.run(count_to(10, next), [&](const PoolItem& item, PoolResult&& r) {
    if (item.id == 3) {
      EXPECT_EQ(r.status, PoolStatus::crashed);
      EXPECT_EQ(r.signal, SIGABRT);
      EXPECT_EQ(r.error, "worker killed by signal " + std::to_string(SIGABRT));
      return;
    }
    ASSERT_TRUE(r.ok()) << r.error;
    pid_of[static_cast<size_t>(item.id)] = r.response;
    ++ok;
  });
  EXPECT_EQ(ok, 9);
  // Items 0-2 ran in the first worker; the crash replaced it, and items 4-9
  // ran in the replacement.
  for (int id : {1, 2}) EXPECT_EQ(pid_of[id], pid_of[0]);
  for (int id = 5; id < 10; ++id) EXPECT_EQ(pid_of[id], pid_of[4]);
  EXPECT_FALSE(pid_of[0].empty());
  EXPECT_NE(pid_of[4], pid_of[0]);
}

TEST(ProcessPool, AHangingItemTimesOutAndTheOthersGoOn) {
  ProcessPoolOptions options;
  options.workers = 2;
  options.item_timeout_seconds = 0.5;
  ProcessPool pool(options, [](int, const PoolItem& item) {
    if (item.id == 1) pause();
    return std::to_string(item.id);
  });
  int64_t next = 0;
  std::vector<PoolStatus> status(6);
  const auto start = Clock::now();
  pool.run(count_to(6, next), [&](const PoolItem& item, PoolResult&& r) {
    status[static_cast<size_t>(item.id)] = r.status;
  });
  EXPECT_LT(seconds_since(start), 5.0);
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(status[static_cast<size_t>(i)], i == 1 ? PoolStatus::timed_out : PoolStatus::ok) << i;
  // An item's own limit takes precedence over the pool's.
  PoolItem quick;
  quick.id = 7;
  quick.timeout_seconds = 0.2;
  PoolItem hang;
  hang.id = 1;
  hang.timeout_seconds = 0.2;
  const auto again = Clock::now();
  PoolResult r = pool.run_one(hang);
  EXPECT_EQ(r.status, PoolStatus::timed_out);
  EXPECT_EQ(r.error, "timed out after 0.2 s");
  EXPECT_LT(seconds_since(again), 0.45);
  EXPECT_TRUE(pool.run_one(quick).ok());  // the slot's worker was replaced
}

TEST(ProcessPool, AnExceptionInDoneKillsTheItemsInFlight) {
  int pids[2];
  ASSERT_EQ(pipe(pids), 0);
  ProcessPoolOptions options;
  options.workers = 3;
  ProcessPool pool(options, [&](int, const PoolItem& item) {
    if (item.id == 0) {
      sleep_ms(300);
      return std::string();
    }
    pid_t self = getpid();
    if (write(pids[1], &self, sizeof self) != sizeof self) _exit(3);
    pause();
    return std::string();
  });
  int64_t next = 0;
  const auto start = Clock::now();
  EXPECT_THROW(
      pool.run(count_to(3, next), [](const PoolItem&, PoolResult&&) { throw Error("stop here"); }),
      Error);
  EXPECT_LT(seconds_since(start), 5.0);
  // (The idle worker of item 0 still holds the pipe: read just the two pids.)
  std::vector<pid_t> hung(2);
  ASSERT_EQ(read(pids[0], hung.data(), 2 * sizeof(pid_t)), static_cast<ssize_t>(2 * sizeof(pid_t)));
  ::close(pids[0]);
  ::close(pids[1]);
  for (pid_t p : hung) EXPECT_TRUE(process_is_gone(p)) << p;  // killed and reaped
  // The pool is usable again.
  PoolItem item;
  item.id = 0;
  EXPECT_TRUE(pool.run_one(item).ok());
}

TEST(ProcessPool, IdleWorkersExitWhenThePoolIsDestroyed) {
  std::set<pid_t> workers;
  {
    ProcessPoolOptions options;
    options.workers = 2;
    ProcessPool pool(options, [](int, const PoolItem&) { return std::to_string(getpid()); });
    int64_t next = 0;
    pool.run(count_to(4, next), [&](const PoolItem&, PoolResult&& r) {
      workers.insert(static_cast<pid_t>(std::stol(r.response)));
    });
    ASSERT_EQ(workers.size(), 2u);
    for (pid_t p : workers) EXPECT_FALSE(process_is_gone(p));
  }
  for (pid_t p : workers) EXPECT_TRUE(process_is_gone(p)) << p;
}

TEST(ProcessPool, AThrowingItemFailsAndItsWorkerStays) {
  ProcessPoolOptions options;
  options.workers = 1;
  ProcessPool pool(options, [](int, const PoolItem& item) {
    if (item.id == 1) throw Error("bad item");
    return std::to_string(getpid());
  });
  int64_t next = 0;
  std::vector<PoolResult> results;
  pool.run(count_to(3, next),
           [&](const PoolItem&, PoolResult&& r) { results.push_back(std::move(r)); });
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[1].status, PoolStatus::failed);
  EXPECT_EQ(results[1].error, "bad item");
  ASSERT_TRUE(results[0].ok() && results[2].ok());
  EXPECT_EQ(results[0].response, results[2].response);
}

TEST(ProcessPool, RequestsAttemptsAndSlotsReachTheWorker) {
  ProcessPoolOptions options;
  options.workers = 2;
  ProcessPool pool(options, [](int slot, const PoolItem& item) {
    return item.request + "/" + std::to_string(item.attempt) + "/" + std::to_string(item.id) + "/" +
           std::to_string(slot);
  });
  std::string big(300000, 'x');  // more than a socket buffer holds
  PoolItem item;
  item.id = 42;
  item.attempt = 7;
  item.request = big;
  PoolResult r = pool.run_one(item);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.response, big + "/7/42/0");
}

TEST(ProcessPool, NothingNowIsNotTheEnd) {
  ProcessPoolOptions options;
  options.workers = 3;
  ProcessPool pool(options, [](int, const PoolItem& item) { return std::to_string(item.id); });
  // One item at a time: next() has nothing while an item runs.
  int64_t given = 0, finished = 0;
  pool.run(
      [&]() -> std::optional<PoolItem> {
        if (given > finished || given == 5) return std::nullopt;
        PoolItem item;
        item.id = given++;
        return item;
      },
      [&](const PoolItem&, PoolResult&&) { ++finished; });
  EXPECT_EQ(finished, 5);
}

TEST(ProcessPool, AWorkerPerItemSeesTheItemAndTheLimits) {
  ProcessPoolOptions options;
  options.workers = 2;
  options.process_per_item = true;
  options.limits.file_size_bytes = 1u << 20;
  options.limits.open_files = 64;
  options.limits.core_dumps = false;
  std::vector<std::string> words;  // filled after the pool is made
  ProcessPool pool(options, [&](int, const PoolItem& item) {
    rlimit fsize{}, nofile{}, core{};
    getrlimit(RLIMIT_FSIZE, &fsize);
    getrlimit(RLIMIT_NOFILE, &nofile);
    getrlimit(RLIMIT_CORE, &core);
    return words.at(static_cast<size_t>(item.id)) + " " + std::to_string(fsize.rlim_cur) + " " +
           std::to_string(nofile.rlim_max) + " " + std::to_string(core.rlim_cur) + " " +
           std::to_string(getpid());
  });
  int64_t next = 0;
  std::vector<std::string> responses;
  std::set<std::string> pids;
  pool.run(
      [&]() -> std::optional<PoolItem> {
        if (next >= 4) return std::nullopt;
        words.push_back("w" + std::to_string(next));
        PoolItem item;
        item.id = next++;
        return item;
      },
      [&](const PoolItem&, PoolResult&& r) {
        ASSERT_TRUE(r.ok()) << r.error;
        responses.push_back(r.response.substr(0, r.response.rfind(' ')));
        pids.insert(r.response.substr(r.response.rfind(' ') + 1));
      });
  EXPECT_EQ(responses, (std::vector<std::string>{"w0 1048576 64 0", "w1 1048576 64 0",
                                                 "w2 1048576 64 0", "w3 1048576 64 0"}));
  EXPECT_EQ(pids.size(), 4u);  // a fresh process each
}

TEST(ProcessPool, ZeroWorkersRunItemsInThisProcess) {
  ProcessPoolOptions options;
  options.workers = 0;
  ProcessPool pool(options, [](int, const PoolItem& item) {
    if (item.id == 1) throw Error("bad item");
    return std::to_string(getpid());
  });
  int64_t next = 0;
  std::vector<PoolResult> results;
  pool.run(count_to(2, next),
           [&](const PoolItem&, PoolResult&& r) { results.push_back(std::move(r)); });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].response, std::to_string(getpid()));
  EXPECT_EQ(results[1].status, PoolStatus::failed);
}

TEST(ProcessPool, MessagesRoundTripAndTruncationIsAnError) {
  std::string bytes =
      MessageWriter().put(int64_t{-5}).put(2.5).put(std::string_view("text")).put(true).take();
  MessageReader in(bytes);
  EXPECT_EQ(in.get<int64_t>(), -5);
  EXPECT_EQ(in.get<double>(), 2.5);
  EXPECT_EQ(in.get_string(), "text");
  EXPECT_TRUE(in.get<bool>());
  EXPECT_THROW(in.get<int>(), Error);
  MessageReader cut(std::string_view(bytes).substr(0, bytes.size() - 4));
  cut.get<int64_t>();
  cut.get<double>();
  EXPECT_THROW(cut.get_string(), Error);
}

}  // namespace
}  // namespace trex
