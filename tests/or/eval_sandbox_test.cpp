// The sandbox: limits, capture, cleanup, parallel runs, in-process tasks.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "trex/or/eval/sandbox.hpp"

namespace trex::orlib::eval {
namespace {

SandboxTask shell(const std::string& script, double seconds = 5.0) {
  SandboxTask t;
  t.argv = {"/bin/sh", "-c", script};
  t.env = {"PATH=/usr/bin:/bin"};
  t.limits.wall_seconds = seconds;
  t.limits.cpu_seconds = seconds;
  t.limits.memory_bytes = 512ull << 20;
  t.limits.max_processes = 16;
  return t;
}

Sandbox make_sandbox(int jobs = 1) {
  SandboxConfig c;
  c.jobs = jobs;
  return Sandbox(c);
}

TEST(EvalSandbox, CapturesOutputAndExitCode) {
  Sandbox sb = make_sandbox();
  SandboxResult r = sb.run_one(shell("echo out; echo err >&2; printf 'res' >&3; exit 7"));
  EXPECT_EQ(r.end, SandboxEnd::exited);
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.out.text(), "out\n");
  EXPECT_EQ(r.err.text(), "err\n");
  EXPECT_EQ(r.result, "res");
}

TEST(EvalSandbox, RunsInAFreshDirectoryThatIsRemoved) {
  Sandbox sb = make_sandbox();
  SandboxTask t = shell("pwd; ls; cat given.txt; echo $HOME; echo $TMPDIR");
  t.files = {{"given.txt", "hello\n"}};
  SandboxResult r = sb.run_one(t);
  ASSERT_EQ(r.end, SandboxEnd::exited) << r.err.text();
  auto lines = r.out.text();
  std::string dir = lines.substr(0, lines.find('\n'));
  EXPECT_NE(dir.find("trex-eval-"), std::string::npos) << dir;
  EXPECT_NE(lines.find("given.txt\nhello"), std::string::npos) << lines;
  EXPECT_NE(lines.find("\n" + dir + "\n" + dir + "\n"), std::string::npos) << lines;
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(EvalSandbox, WallAndCpuTimeLimits) {
  Sandbox sb = make_sandbox();
  SandboxResult sleep = sb.run_one(shell("sleep 100", 0.5));
  EXPECT_EQ(sleep.end, SandboxEnd::wall_timeout);
  EXPECT_LT(sleep.wall_seconds, 3.0);
  SandboxTask busy = shell("while :; do :; done", 30.0);
  busy.limits.cpu_seconds = 1.0;
  SandboxResult cpu = sb.run_one(busy);
  EXPECT_EQ(cpu.end, SandboxEnd::cpu_timeout);
  EXPECT_GE(cpu.cpu_seconds, 0.5);
  EXPECT_LT(cpu.wall_seconds, 10.0);
}

TEST(EvalSandbox, OutputIsCappedAndFloodsAreKilled) {
  Sandbox sb = make_sandbox();
  SandboxTask t = shell("i=0; while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); done");
  t.limits.keep_output_bytes = 1000;
  SandboxResult r = sb.run_one(t);
  ASSERT_EQ(r.end, SandboxEnd::exited);
  EXPECT_TRUE(r.out.truncated());
  EXPECT_EQ(r.out.head.substr(0, 6), "line0\n");
  EXPECT_NE(r.out.tail.find("line2999\n"), std::string::npos);
  EXPECT_LE(r.out.head.size() + r.out.tail.size(), 1000u);
  EXPECT_NE(r.out.text().find("bytes omitted"), std::string::npos);

  SandboxTask flood = shell("yes spam", 20.0);
  flood.limits.kill_output_bytes = 1u << 20;
  SandboxResult f = sb.run_one(flood);
  EXPECT_EQ(f.end, SandboxEnd::output_limit);
  EXPECT_GT(f.out.total, 1u << 20);
  EXPECT_LT(f.wall_seconds, 10.0);
}

TEST(EvalSandbox, InvalidUtf8AndBinaryOutputPassThrough) {
  Sandbox sb = make_sandbox();
  SandboxResult r = sb.run_one(shell("printf '\\377\\376\\000x'"));
  ASSERT_EQ(r.end, SandboxEnd::exited);
  EXPECT_EQ(r.out.text(), std::string("\xff\xfe\0x", 4));
}

TEST(EvalSandbox, CrashesAreSignals) {
  Sandbox sb = make_sandbox();
  SandboxResult r = sb.run_one(shell("kill -SEGV $$"));
  EXPECT_EQ(r.end, SandboxEnd::signaled);
  EXPECT_EQ(r.signal, SIGSEGV);
}

TEST(EvalSandbox, FileSizeLimit) {
  Sandbox sb = make_sandbox();
  SandboxTask t = shell("head -c 3000000 /dev/zero > big; echo rc=$?");
  t.limits.file_size_bytes = 1u << 20;
  SandboxResult r = sb.run_one(t);
  // head is killed by SIGXFSZ (or fails with EFBIG); the file never exceeds the limit.
  EXPECT_EQ(r.end, SandboxEnd::exited);
  EXPECT_EQ(r.out.text().find("rc=0"), std::string::npos) << r.out.text();
}

TEST(EvalSandbox, ProcessLimitStopsForkBombs) {
  Sandbox sb = make_sandbox();
  SandboxTask t = shell("bomb() { bomb | bomb & }; bomb; sleep 3; echo survived", 3.0);
  t.limits.max_processes = 8;
  SandboxResult r = sb.run_one(t);
  // Kernel-enforced limit: forks fail; watched limit: the sandbox is killed.
  EXPECT_TRUE(r.end == SandboxEnd::exited || r.end == SandboxEnd::process_limit ||
              r.end == SandboxEnd::wall_timeout)
      << to_string(r.end);
  // Nothing of it is left running.
  usleep(200000);
  int left = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    FILE* f = std::fopen(("/proc/" + name + "/cmdline").c_str(), "r");
    if (!f) continue;
    char buf[256] = {0};
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    std::string cmd(buf, n);
    if (cmd.find("bomb() { bomb | bomb") != std::string::npos) ++left;
  }
  EXPECT_EQ(left, 0);
}

TEST(EvalSandbox, MemoryLimit) {
  Sandbox sb = make_sandbox();
  SandboxTask t;
  t.in_child = [](int fd) {
    std::vector<char*> blocks;
    for (int i = 0; i < 64; ++i) {
      char* p = static_cast<char*>(std::malloc(64u << 20));
      if (p == nullptr) {
        ::write(fd, "oom", 3);
        return;
      }
      std::memset(p, 1, 64u << 20);
      blocks.push_back(p);
    }
    ::write(fd, "allocated", 9);
  };
  t.limits.memory_bytes = 512ull << 20;
  SandboxResult r = sb.run_one(t);
  EXPECT_TRUE((r.end == SandboxEnd::exited && r.result == "oom") ||
              r.end == SandboxEnd::memory_limit)
      << to_string(r.end) << " " << r.result;
}

TEST(EvalSandbox, LeftoverProcessesAreKilled) {
  Sandbox sb = make_sandbox();
  // Two sleepers: one in the sandbox's session, one that left it with setsid.
  const std::string marker = "3000." + std::to_string(getpid());
  SandboxResult r =
      sb.run_one(shell("sleep " + marker + " & setsid sleep " + marker + " & echo started"));
  EXPECT_EQ(r.end, SandboxEnd::exited);
  EXPECT_EQ(r.out.text(), "started\n");
  usleep(300000);
  int left = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    FILE* f = std::fopen((e.path() / "cmdline").c_str(), "r");
    if (!f) continue;
    char buf[256] = {0};
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    if (std::string(buf, n).find(marker) != std::string::npos) ++left;
  }
  EXPECT_EQ(left, 0);
}

TEST(EvalSandbox, WritesOutsideTheDirectoryAreDenied) {
  Sandbox sb = make_sandbox();
  if (!sb.isolation().landlock_fs) GTEST_SKIP() << "kernel without Landlock";
  const std::string outside = "/tmp/trex_eval_escape_" + std::to_string(getpid());
  SandboxResult r = sb.run_one(shell("echo x > inside && echo x > " + outside + "; echo rc=$?"));
  EXPECT_NE(r.out.text().find("rc="), std::string::npos) << r.out.text() << r.err.text();
  EXPECT_EQ(r.out.text().find("rc=0"), std::string::npos) << r.out.text() << r.err.text();
  EXPECT_FALSE(std::filesystem::exists(outside));
  std::filesystem::remove(outside);
}

TEST(EvalSandbox, SetupFailuresAreReported) {
  Sandbox sb = make_sandbox();
  SandboxTask t;
  t.argv = {"/nonexistent/trex-interpreter"};
  SandboxResult r = sb.run_one(t);
  EXPECT_EQ(r.end, SandboxEnd::setup_failed);
  EXPECT_NE(r.setup_error.find("cannot execute"), std::string::npos) << r.setup_error;
}

TEST(EvalSandbox, ParallelRunsReportEveryTask) {
  Sandbox sb = make_sandbox(3);
  int64_t next = 0;
  std::map<int64_t, std::string> outputs;
  std::set<int> slots_seen;
  sb.run(
      [&]() -> std::optional<std::pair<int64_t, SandboxTask>> {
        if (next >= 12) return std::nullopt;
        int64_t id = next++;
        return std::make_pair(
            id, shell("sleep 0.0" + std::to_string(id % 5) + "; echo " + std::to_string(id * id)));
      },
      [&](int64_t id, SandboxResult&& r) { outputs[id] = r.out.text(); });
  ASSERT_EQ(outputs.size(), 12u);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(outputs[i], std::to_string(i * i) + "\n");
}

// Tasks run in pool workers forked from the harness: when the harness is
// killed, the next harness must find its uid free at once (no dying worker may
// still hold the lock).
TEST(EvalSandbox, AKilledHarnessLeavesItsUidFree) {
  if (geteuid() != 0) GTEST_SKIP() << "uids per slot need root";
  const std::string lock_dir = access("/run/lock", W_OK) == 0 ? "/run/lock" : "/tmp";
  for (int round = 0; round < 3; ++round) {
    int channel[2];
    ASSERT_EQ(pipe(channel), 0);
    const pid_t harness = fork();
    ASSERT_GE(harness, 0);
    if (harness == 0) {
      setpgid(0, 0);
      SandboxConfig c;
      c.uid_base = 62700;
      Sandbox sb(c);
      const uid_t uid = sb.sandbox_uid(0);
      if (write(channel[1], &uid, sizeof uid) != sizeof uid) _exit(1);
      SandboxTask t = shell("sleep 30", 60.0);
      sb.run_one(t);
      _exit(0);
    }
    ::close(channel[1]);
    uid_t uid = 0;
    ASSERT_EQ(read(channel[0], &uid, sizeof uid), static_cast<ssize_t>(sizeof uid));
    ::close(channel[0]);
    usleep(300000);  // the task is running
    kill(harness, SIGKILL);
    int status = 0;
    waitpid(harness, &status, 0);
    killpg(harness, SIGKILL);
    const std::string lock = lock_dir + "/trex-eval-uid-" + std::to_string(uid) + ".lock";
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << lock;
    EXPECT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0) << "round " << round << ": " << lock << " is held";
    ::close(fd);
    // The next harness (claiming this uid) removes what the killed one left.
    SandboxConfig c;
    c.uid_base = uid;
    Sandbox next(c);
    EXPECT_EQ(next.sandbox_uid(0), uid);
  }
}

TEST(EvalSandbox, ResolvesExecutables) {
  EXPECT_EQ(resolve_executable("/bin/sh"), "/bin/sh");
  EXPECT_FALSE(resolve_executable("sh").empty());
  EXPECT_TRUE(resolve_executable("trex-no-such-program").empty());
  EXPECT_GT(self_peak_rss_kb(), 0);
}

}  // namespace
}  // namespace trex::orlib::eval
