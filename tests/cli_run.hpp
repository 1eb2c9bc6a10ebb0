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

// Runs a shell command line and captures its output.
inline CliRun run_shell(const std::string& cmd) {
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

inline CliRun run_trex(const std::string& args) {
  return run_shell(trex_binary() + " " + args + " 2>&1");
}

// The same, started in the working directory `dir`.
inline CliRun run_trex_in(const std::string& dir, const std::string& args) {
  return run_shell("cd '" + dir + "' && " + trex_binary() + " " + args + " 2>&1");
}

}  // namespace trex::test
