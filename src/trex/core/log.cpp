#include "trex/core/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace trex::log {
namespace {

Level level_from_env() {
  const char* env = std::getenv("TREX_LOG");
  if (env == nullptr) return Level::info;
  if (std::strcmp(env, "debug") == 0) return Level::debug;
  if (std::strcmp(env, "warn") == 0) return Level::warn;
  if (std::strcmp(env, "error") == 0) return Level::error;
  return Level::info;
}

std::atomic<int>& current() {
  static std::atomic<int> value{static_cast<int>(level_from_env())};
  return value;
}

std::mutex& write_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

Level level() {
  return static_cast<Level>(current().load(std::memory_order_relaxed));
}
void set_level(Level l) {
  current().store(static_cast<int>(l));
}

void write(Level l, const std::string& message) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(write_mutex());
  std::fprintf(stderr, "[trex %s] %s\n", names[static_cast<int>(l)], message.c_str());
}

}  // namespace trex::log
