#pragma once
// Paths the tests need, relative to the repository (never machine-absolute).
#include <cstdlib>
#include <filesystem>
#include <string>

namespace trex::test {

inline std::string source_dir() {
  return TREX_SOURCE_DIR;
}
inline std::string trex_binary() {
  return TREX_BINARY;
}
// Shared benchmark data lives next to the repository: ../shared.
inline std::string shared_dir() {
  return source_dir() + "/../shared";
}

// A fresh temporary directory, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "trex-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace trex::test
