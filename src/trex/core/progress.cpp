#include "trex/core/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace trex {

Progress::Progress(std::string label, int64_t total, double quiet_interval_seconds)
    : label_(std::move(label)),
      total_(total),
      tty_(isatty(STDERR_FILENO) != 0),
      quiet_interval_(quiet_interval_seconds),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  const char* env = std::getenv("TREX_PROGRESS");
  enabled_ = !(env != nullptr && std::strcmp(env, "0") == 0);
}

Progress::~Progress() {
  if (!finished_) finish();
}

void Progress::update(int64_t done, const std::string& note) {
  done_ = done;
  note_ = note;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since < (tty_ ? 0.1 : quiet_interval_)) return;
  last_draw_ = now;
  draw(false);
}

void Progress::finish(const std::string& note) {
  if (finished_) return;
  finished_ = true;
  if (!note.empty()) note_ = note;
  draw(true);
}

void Progress::draw(bool final_line) {
  if (!enabled_) return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double fraction = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0.0;
  char counters[160];
  std::snprintf(counters, sizeof counters, "%lld/%lld %5.1f%% %.1f/s %.0fs elapsed%s",
                static_cast<long long>(done_), static_cast<long long>(total_), 100.0 * fraction,
                rate, elapsed, final_line ? "" : "");
  std::string eta_text;
  if (!final_line && rate > 0) eta_text = " eta " + std::to_string(static_cast<long>(eta)) + "s";
  if (tty_) {
    const int width = 24;
    int filled = static_cast<int>(fraction * width + 0.5);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(width - filled), '.');
    std::fprintf(stderr, "\r\033[K%s [%s] %s%s %s", label_.c_str(), bar.c_str(), counters,
                 eta_text.c_str(), note_.c_str());
    if (final_line) std::fputc('\n', stderr);
  } else {
    std::fprintf(stderr, "%s: %s%s %s\n", label_.c_str(), counters, eta_text.c_str(),
                 note_.c_str());
  }
  std::fflush(stderr);
}

}  // namespace trex
