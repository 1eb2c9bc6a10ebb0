#pragma once
// printf into a std::string, for the planner's text reports (lines are short).
#include <cstdio>
#include <string>

namespace trex::plan {

template <class... Args>
std::string formatted(const char* format, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

}  // namespace trex::plan
