#pragma once
// Errors that say where: every user-facing failure names the file, line and/or
// field it is about, so a bad input never turns into a bare "parse error".
#include <stdexcept>
#include <string>

namespace trex {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string message) : std::runtime_error(message), message_(std::move(message)) {
    rebuild();
  }

  Error& file(std::string path) {
    file_ = std::move(path);
    return rebuild();
  }
  Error& line(long line) {
    line_ = line;
    return rebuild();
  }
  Error& field(std::string name) {
    field_ = std::move(name);
    return rebuild();
  }

  const std::string& message() const { return message_; }
  const std::string& file_name() const { return file_; }
  long line_number() const { return line_; }
  const std::string& field_name() const { return field_; }
  const char* what() const noexcept override { return full_.c_str(); }

 private:
  Error& rebuild();

  std::string message_;
  std::string file_;
  long line_ = 0;
  std::string field_;
  std::string full_;
};

// Throws trex::Error(message) when `condition` is false.
inline void require(bool condition, const std::string& message) {
  if (!condition) throw Error(message);
}

}  // namespace trex
