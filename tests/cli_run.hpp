#pragma once
// Runs the built `trex` binary as a user would and captures its output.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "test_paths.hpp"

namespace trex::test {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};

inline CliRun run_trex(const std::string& args) {
  const std::string cmd = trex_binary() + " " + args + " 2>&1";
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace trex::test
