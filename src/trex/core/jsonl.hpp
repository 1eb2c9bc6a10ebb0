#pragma once
// JSON Lines: one JSON value per line. The reader reports the file and line of
// any malformed record; the writer is atomic (see AtomicFile).
//
// Two readers:
//  - read_jsonl(path, fn): strict, for files the program itself wrote; the
//    first malformed line throws trex::Error naming the file and line.
//  - read_jsonl(path, JsonlOptions, fn): for user data of many records. A bad
//    line (unparseable JSON, a record the callback rejects by throwing
//    trex::Error or a nlohmann::json exception, an over-long line) is skipped
//    and counted with its line number; lone UTF-16 surrogate escapes and
//    invalid UTF-8 are replaced by U+FFFD and counted, as Python's
//    errors="replace" does. With JsonlOptions::strict the first bad line
//    throws trex::Error(file:line) instead, as the strict reader does.
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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

// ---- lenient reading of user records

struct JsonlOptions {
  bool strict = false;  // the first bad line throws trex::Error(file, line)
  // Lines longer than this are skipped without being parsed (strict: error);
  // the reader never holds more than this much of one line.
  size_t max_line_bytes = size_t(256) << 20;
  size_t max_reported = 20;  // skipped lines kept with their reason in JsonlStats::skips
};

// Options that keep the first bad line fatal (trex::Error with file:line).
inline JsonlOptions strict_jsonl() {
  JsonlOptions o;
  o.strict = true;
  return o;
}

struct JsonlSkip {
  long line = 0;
  std::string reason;
};

struct JsonlStats {
  std::string path;
  long lines = 0;                // non-blank lines seen
  long records = 0;              // lines whose record was accepted (the callback returned)
  long skipped = 0;              // lines skipped: unparseable, rejected, or too long
  long repaired = 0;             // accepted records whose text had lone surrogates / invalid UTF-8
  long replacements = 0;         // U+FFFD substitutions made in those records
  std::vector<JsonlSkip> skips;  // the first JsonlOptions::max_reported skipped lines

  bool clean() const { return skipped == 0; }
  // {"path", "lines", "records", "skipped", "repaired", "replacements",
  //  "skipped_lines": [{"line", "reason"}, ...]}
  json to_json() const;
  // "120 records, 3 lines skipped (line 4: invalid JSON ...; ...), 2 repaired".
  std::string summary() const;
  // Adds another file's counts (path and line numbers are kept as "file:line").
  void merge(const JsonlStats& other);
};

// One parsed line. `status` is blank for whitespace-only lines, ok when the
// line parsed as it is, repaired when it parsed after repair_json_text (then
// `replacements` > 0), invalid otherwise (`error` says why; `value` is null).
struct JsonlLine {
  enum class Status { blank, ok, repaired, invalid };
  Status status = Status::blank;
  json value;
  long replacements = 0;
  std::string error;
};

// Parses one line (no trailing newline; a trailing '\r' is ignored). The plain
// parse runs first, so valid lines pay nothing for the repair; only when it
// fails is the text repaired and parsed again. Never throws for bad input.
JsonlLine parse_jsonl_line(std::string_view line);

// Returns `text` with every unpaired \uD800-\uDFFF escape rewritten to \ufffd
// and every ill-formed UTF-8 sequence (maximal subpart, as Python's decoder)
// replaced by EF BF BD; `*replacements` (when given) receives the count.
// Escaped backslashes are respected: "\\udcff" is not an escape.
std::string repair_json_text(std::string_view text, long* replacements = nullptr);

// Calls `fn(record, line_number)` for each good line (see the notes at the top
// of this file); returns the counts. Throws trex::Error when the file cannot
// be opened, and in strict mode at the first bad line.
JsonlStats read_jsonl(const std::string& path, const JsonlOptions& options,
                      const std::function<void(const json&, long)>& fn);
// The same, also passing `index`: the line's 0-based position among the file's
// non-blank lines, skipped ones included (so positions do not shift when a
// line is skipped).
JsonlStats read_jsonl_indexed(const std::string& path, const JsonlOptions& options,
                              const std::function<void(const json&, long line, long index)>& fn);

// Exit status of a command that read user records: 0 when nothing was skipped,
// kExitRecordsSkipped (3) when it completed but skipped some lines.
inline constexpr int kExitRecordsSkipped = 3;

// Canonical single-line serialisation (sorted keys come from nlohmann's map).
std::string dump_compact(const json& value);

}  // namespace trex
