#pragma once
// A scratch directory for generated corpora: either a given directory (kept)
// or a fresh temporary one (removed with the object).
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "trex/core/error.hpp"

namespace trex::orlib::eval {

class ScratchDir {
 public:
  ScratchDir(const std::string& keep_dir, const std::string& temp_root) {
    if (!keep_dir.empty()) {
      std::filesystem::create_directories(keep_dir);
      path_ = keep_dir;
      return;
    }
    std::string root = temp_root;
    if (root.empty()) {
      const char* t = std::getenv("TMPDIR");
      root = t && *t ? t : "/tmp";
    }
    std::string pattern = root + "/trex-eval-scratch-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr)
      throw Error("cannot create a scratch directory").file(pattern);
    path_ = buf.data();
    owned_ = true;
  }
  ~ScratchDir() {
    if (!owned_) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
  bool owned_ = false;
};

}  // namespace trex::orlib::eval
