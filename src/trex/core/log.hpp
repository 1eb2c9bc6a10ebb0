#pragma once
// Minimal leveled logging to stderr. Level from TREX_LOG (debug|info|warn|error).
#include <sstream>
#include <string>

namespace trex::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

Level level();
void set_level(Level level);
void write(Level level, const std::string& message);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
void debug(const Args&... args) {
  if (level() <= Level::debug) write(Level::debug, concat(args...));
}
template <typename... Args>
void info(const Args&... args) {
  if (level() <= Level::info) write(Level::info, concat(args...));
}
template <typename... Args>
void warn(const Args&... args) {
  if (level() <= Level::warn) write(Level::warn, concat(args...));
}
template <typename... Args>
void error(const Args&... args) {
  write(Level::error, concat(args...));
}

}  // namespace trex::log
