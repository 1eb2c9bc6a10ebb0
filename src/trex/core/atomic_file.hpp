#pragma once
// Atomic file writes: data goes to "<path>.tmp.<pid>" and is renamed over
// <path> only after a successful flush + fsync, so readers see either the old
// file or the complete new one, never a torn write.
#include <cstdio>
#include <string>
#include <string_view>

namespace trex {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // discards the temp file if commit() was not called
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view data);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
};

void write_file_atomic(const std::string& path, std::string_view data);
std::string read_file(const std::string& path);
// Creates the parent directory of `path` if needed.
void ensure_parent_dir(const std::string& path);

}  // namespace trex
