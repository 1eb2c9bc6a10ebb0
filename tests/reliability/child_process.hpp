#pragma once
// Runs the `trex` binary as a child process for the crash-safety tests: extra
// environment variables, an optional RLIMIT_FSIZE, an optional SIGKILL after a
// delay; output goes to a log file (no pipe to fill). Arguments are split at
// spaces; '' is an empty argument.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "test_paths.hpp"

extern char** environ;

namespace trex::test {

struct ChildResult {
  bool killed = false;  // died of SIGKILL
  int signal = 0;       // the signal it died of, 0 if it exited
  int exit_code = -1;   // when it exited
  double seconds = 0;
  std::string output;
};

struct ChildOptions {
  std::vector<std::pair<std::string, std::string>> env = {};
  double kill_after_seconds = -1;  // >= 0: SIGKILL after this long
  long long file_size_limit = -1;  // >= 0: RLIMIT_FSIZE in bytes
  // Run through this command (e.g. mpiexec -n 2 …): argv = launcher + trex + args.
  std::vector<std::string> launcher = {};
};

inline std::vector<std::string> split_args(const std::string& args) {
  std::vector<std::string> out;
  std::istringstream in(args);
  std::string word;
  while (in >> word) out.push_back(word == "''" ? std::string() : word);  // '' = empty
  return out;
}

inline ChildResult run_child(const std::string& args, const std::string& log_path,
                             const ChildOptions& options = {}) {
  std::vector<std::string> argv_storage = options.launcher;
  argv_storage.push_back(trex_binary());
  for (auto& a : split_args(args)) argv_storage.push_back(a);
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment is built before fork (nothing but async-signal-safe calls after it).
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [k, v] : options.env) replaced = replaced || entry.rfind(k + "=", 0) == 0;
    if (!replaced) env_storage.push_back(entry);
  }
  for (const auto& [k, v] : options.env) env_storage.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    if (options.file_size_limit >= 0) {
      struct rlimit limit;
      limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(options.file_size_limit);
      setrlimit(RLIMIT_FSIZE, &limit);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  ChildResult r;
  int status = 0;
  if (options.kill_after_seconds >= 0) {
    while (true) {
      const pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) break;
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (elapsed >= options.kill_after_seconds) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } else {
    waitpid(pid, &status, 0);
  }
  kill(-pid, SIGKILL);  // anything the child started (solver / sandbox processes)
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
    r.killed = r.signal == SIGKILL;
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
  std::ifstream in(log_path);
  std::ostringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

}  // namespace trex::test
