#include "trex/core/atomic_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "trex/core/error.hpp"

namespace trex {

void ensure_parent_dir(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) throw Error("cannot create directory: " + ec.message()).file(parent.string());
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  ensure_parent_dir(path_);
  temp_path_ = path_ + ".tmp." + std::to_string(getpid());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (file_ == nullptr)
    throw Error(std::string("cannot open for writing: ") + std::strerror(errno)).file(temp_path_);
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

void AtomicFile::write(std::string_view data) {
  if (file_ == nullptr) throw Error("write after commit").file(path_);
  if (!data.empty() && std::fwrite(data.data(), 1, data.size(), file_) != data.size())
    throw Error(std::string("write failed: ") + std::strerror(errno)).file(temp_path_);
}

void AtomicFile::commit() {
  if (file_ == nullptr) return;
  bool ok = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) {
    std::remove(temp_path_.c_str());
    throw Error(std::string("flush failed: ") + std::strerror(errno)).file(temp_path_);
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    std::string why = std::strerror(errno);
    std::remove(temp_path_.c_str());
    throw Error("rename failed: " + why).file(path_);
  }
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
