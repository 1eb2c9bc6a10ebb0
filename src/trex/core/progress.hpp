#pragma once
// A progress bar for long work. Draws in place on a terminal; when stderr is
// not a TTY (CI, pipes) it prints a plain line at most every `quiet_interval`
// seconds, and nothing at all when TREX_PROGRESS=0.
#include <chrono>
#include <cstdint>
#include <string>

namespace trex {

class Progress {
 public:
  Progress(std::string label, int64_t total, double quiet_interval_seconds = 30.0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Advances to `done` items; `note` is shown after the counters (e.g. "rejected 3").
  void update(int64_t done, const std::string& note = {});
  void finish(const std::string& note = {});

 private:
  void draw(bool final_line);

  std::string label_;
  int64_t total_;
  int64_t done_ = 0;
  std::string note_;
  bool tty_;
  bool enabled_;
  bool finished_ = false;
  double quiet_interval_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace trex
