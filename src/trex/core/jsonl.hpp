#pragma once
// JSON Lines: one JSON value per line. The reader reports the file and line of
// any malformed record; the writer is atomic (see AtomicFile).
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trex/core/atomic_file.hpp"

namespace trex {

using json = nlohmann::json;

class JsonlWriter {
 public:
  explicit JsonlWriter(std::string path) : file_(std::move(path)) {}
  void write(const json& record);
  void write_line(std::string_view serialized);  // already dumped, no newline
  void commit() { file_.commit(); }
  size_t count() const { return count_; }

 private:
  AtomicFile file_;
  size_t count_ = 0;
};

// Calls `fn(record, line_number)` for each non-blank line. Parse errors throw
// trex::Error naming the file and line.
void read_jsonl(const std::string& path, const std::function<void(const json&, long)>& fn);
std::vector<json> read_jsonl(const std::string& path);

// Canonical single-line serialisation (sorted keys come from nlohmann's map).
std::string dump_compact(const json& value);

}  // namespace trex
