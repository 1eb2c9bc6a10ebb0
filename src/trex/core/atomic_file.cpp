#include "trex/core/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "trex/core/error.hpp"

namespace trex {

namespace {

struct FaultConfig {
  long kill_at = 0;  // 0: never
  int trace_fd = -1;
  FaultConfig() {
    // TREX_FAULT_RANK=r: only the process of MPI world rank r (as its launcher
    // exports it) counts and acts, so a test can kill one rank of a job.
    if (const char* only = std::getenv("TREX_FAULT_RANK")) {
      const char* mine = nullptr;
      for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
        if (!mine) mine = std::getenv(name);
      if (!mine || std::strcmp(mine, only) != 0) return;
    }
    if (const char* k = std::getenv("TREX_FAULT_KILL_AT")) kill_at = std::strtol(k, nullptr, 10);
    if (const char* t = std::getenv("TREX_FAULT_TRACE"))
      trace_fd = ::open(t, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
};

const FaultConfig& fault_config() {
  static const FaultConfig config;
  return config;
}

// A write past RLIMIT_FSIZE should fail with EFBIG, not kill the process.
void ignore_sigxfsz_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGXFSZ, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
        !(current.sa_flags & SA_SIGINFO))
      signal(SIGXFSZ, SIG_IGN);
  });
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Removes "<path>.tmp.<pid>" files left by processes that no longer exist.
void remove_stale_temps(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (!all_digits(pid_text) || pid_text.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid == getpid()) continue;
    if (::kill(pid, 0) == -1 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

std::string errno_text(int error_number) {
  return std::string(std::strerror(error_number)) + " (errno " + std::to_string(error_number) + ")";
}

}  // namespace

void fault_point(const char* event, const std::string& path) {
  const FaultConfig& config = fault_config();
  if (config.kill_at <= 0 && config.trace_fd < 0) return;
  static std::atomic<long> counter{0};
  const long k = ++counter;
  if (config.trace_fd >= 0) {
    const std::string line = std::to_string(k) + " " + event + " " + path + "\n";
    [[maybe_unused]] const ssize_t n = ::write(config.trace_fd, line.data(), line.size());
  }
  if (k == config.kill_at) ::raise(SIGKILL);
}

void ensure_parent_dir(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) throw Error("cannot create directory: " + ec.message()).file(parent.string());
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  ignore_sigxfsz_once();
  ensure_parent_dir(path_);
  remove_stale_temps(path_);
  temp_path_ = path_ + ".tmp." + std::to_string(getpid());
  file_ = std::fopen(temp_path_.c_str(), "wbe");
  if (file_ == nullptr) {
    const int e = errno;
    throw Error("cannot create the temporary file " + temp_path_ + ": " + errno_text(e))
        .file(path_);
  }
  fault_point("open", path_);
}

AtomicFile::~AtomicFile() {
  discard();
}

void AtomicFile::discard() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  file_ = nullptr;
  std::remove(temp_path_.c_str());
}

void AtomicFile::fail(const std::string& what, int error_number) {
  discard();
  throw Error(what + ": " + errno_text(error_number) +
              "; nothing was written (the file keeps its previous content, if any)")
      .file(path_);
}

void AtomicFile::write(std::string_view data) {
  if (file_ == nullptr) throw Error("write after commit").file(path_);
  if (!data.empty() && std::fwrite(data.data(), 1, data.size(), file_) != data.size())
    fail("write failed", errno);
  fault_point("write", path_);
}

void AtomicFile::commit() {
  if (file_ == nullptr) return;
  if (std::fflush(file_) != 0) fail("write failed (flush)", errno);
  if (::fsync(fileno(file_)) != 0) fail("fsync failed", errno);
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) {
    const int e = errno;
    std::remove(temp_path_.c_str());
    throw Error("close failed: " + errno_text(e) +
                "; nothing was written (the file keeps its previous content, if any)")
        .file(path_);
  }
  fault_point("synced", path_);
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    std::remove(temp_path_.c_str());
    throw Error("rename of " + temp_path_ + " failed: " + errno_text(e)).file(path_);
  }
  fault_point("renamed", path_);
  fsync_directory(std::filesystem::path(path_).parent_path().string());
  fault_point("dir_synced", path_);
}

void write_file_atomic(const std::string& path, std::string_view data) {
  AtomicFile f(path);
  f.write(data);
  f.commit();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string("cannot open: ") + std::strerror(errno)).file(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace trex
