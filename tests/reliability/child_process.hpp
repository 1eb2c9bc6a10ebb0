#pragma once
// Runs the `trex` binary as a child process for the crash-safety tests: extra
// environment variables, an optional RLIMIT_FSIZE, an optional SIGKILL after a
// delay; output goes to a log file (no pipe to fill). Arguments are split at
// spaces; '' is an empty argument.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
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

// Every process below `root` (children first found through /proc's parent
// links, then theirs), e.g. the ranks an mpiexec started: Open MPI puts each
// rank in a process group of its own, so killing the launcher's group misses
// them, and a rank left running would still write while a test inspects what
// the "crash" left.
inline std::vector<pid_t> descendants_of(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, ppid)
  if (DIR* proc = opendir("/proc")) {
    while (dirent* e = readdir(proc)) {
      const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
      if (pid <= 0) continue;
      std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      // pid (comm) state ppid …: comm may hold spaces, so parse after the last ')'.
      const size_t close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 1));
      std::string state;
      long ppid = 0;
      rest >> state >> ppid;
      parent_of.push_back({pid, static_cast<pid_t>(ppid)});
    }
    closedir(proc);
  }
  std::vector<pid_t> out = {root};
  for (size_t i = 0; i < out.size(); ++i)
    for (const auto& [pid, ppid] : parent_of)
      if (ppid == out[i]) out.push_back(pid);
  out.erase(out.begin());
  return out;
}

// SIGKILLs `pids` and waits until none is left (they are not our children:
// poll until kill(pid, 0) fails), at most ~10 s.
inline void kill_and_wait_gone(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) kill(p, SIGKILL);
  for (int tries = 0; tries < 10000; ++tries) {
    bool alive = false;
    for (pid_t p : pids) alive = alive || kill(p, 0) == 0;
    if (!alive) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
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
        // The whole tree at once (a launcher's ranks included), and only then
        // reap: nothing of the run may still be writing afterwards.
        const std::vector<pid_t> below = descendants_of(pid);
        kill(pid, SIGKILL);
        kill_and_wait_gone(below);
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
