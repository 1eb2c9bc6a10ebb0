#include "trex/core/jsonl.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex {

std::string dump_compact(const json& value) {
  // Replace invalid UTF-8 instead of throwing: records may carry solver logs.
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

void JsonlWriter::write(const json& record) {
  write_line(dump_compact(record));
}

void JsonlWriter::write_line(std::string_view serialized) {
  file_.write(serialized);
  file_.write("\n");
  ++count_;
}

void read_jsonl(const std::string& path, const std::function<void(const json&, long)>& fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string("cannot open: ") + std::strerror(errno)).file(path);
  std::string line;
  long number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json value;
    try {
      value = json::parse(line);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e999
      throw Error(std::string("invalid JSON: ") + e.what()).file(path).line(number);
    }
    fn(value, number);
  }
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  read_jsonl(path, [&](const json& v, long) { out.push_back(v); });
  return out;
}

// ---- lenient reading

namespace {

constexpr int kMaxDepth = 1000;  // deeper records are skipped (callers recurse over them)
constexpr size_t kMaxReason = 240;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of a \uXXXX escape starting at text[i] (the backslash), or -1.
long escape_unit(std::string_view text, size_t i) {
  if (i + 6 > text.size() || text[i] != '\\' || text[i + 1] != 'u') return -1;
  long v = 0;
  for (size_t k = i + 2; k < i + 6; ++k) {
    int h = hex_value(text[k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// Nesting depth of the JSON text, ignoring brackets inside strings.
bool deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// A parser message made safe for a report: printable ASCII, bounded length.
std::string printable(std::string_view text) {
  std::string out;
  for (char ch : text) {
    if (out.size() >= kMaxReason) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F) {
      out += ch;
    } else {
      static const char* digits = "0123456789abcdef";
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

bool try_parse(std::string_view text, json& value, std::string* error) {
  try {
    value = json::parse(text);
    return true;
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e999
    if (error) *error = printable(e.what());
  }
  return false;
}

// Reads lines of any length in blocks, keeping at most `max` bytes of one line.
class LineReader {
 public:
  explicit LineReader(std::ifstream& in) : in_(in), buf_(size_t(1) << 20) {}

  // False at the end of the file. `too_long` is set when the line had more
  // than `max` bytes; `line` then holds only its first `max` bytes.
  bool next(std::string& line, size_t max, bool& too_long) {
    line.clear();
    too_long = false;
    bool any = false;
    for (;;) {
      if (pos_ == end_) {
        if (!fill()) return any;
      }
      any = true;
      const char* start = buf_.data() + pos_;
      const void* nl = std::memchr(start, '\n', end_ - pos_);
      const size_t n = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : end_ - pos_;
      if (!too_long) {
        if (line.size() + n > max) {
          line.append(start, max - line.size());
          too_long = true;
        } else {
          line.append(start, n);
        }
      }
      pos_ += n;
      if (nl) {
        ++pos_;
        return true;
      }
    }
  }

 private:
  bool fill() {
    if (!in_) return false;
    in_.read(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    pos_ = 0;
    end_ = static_cast<size_t>(in_.gcount());
    return end_ > 0;
  }

  std::ifstream& in_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
};

}  // namespace

std::string repair_json_text(std::string_view text, long* replacements) {
  std::string out;
  out.reserve(text.size() + 16);
  long count = 0;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\\') {
      const long unit = escape_unit(text, i);
      if (unit >= 0xD800 && unit <= 0xDBFF) {
        const long low = escape_unit(text, i + 6);
        if (low >= 0xDC00 && low <= 0xDFFF) {
          out.append(text.substr(i, 12));
          i += 12;
        } else {
          out += "\\ufffd";
          ++count;
          i += 6;
        }
      } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
        out += "\\ufffd";
        ++count;
        i += 6;
      } else if (unit >= 0) {
        out.append(text.substr(i, 6));
        i += 6;
      } else if (i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) < 0x80) {
        out.append(text.substr(i, 2));  // \\, \", \n, ...: the next character is not an escape
        i += 2;
      } else {
        out += c;
        ++i;
      }
      continue;
    }
    const long n = utf8_sequence(text, i);
    if (n > 0) {
      out.append(text.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";
      ++count;
      i += static_cast<size_t>(-n);
    }
  }
  if (replacements) *replacements = count;
  return out;
}

JsonlLine parse_jsonl_line(std::string_view line) {
  JsonlLine r;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return r;
  if (deeper_than(line, kMaxDepth)) {
    r.status = JsonlLine::Status::invalid;
    r.error = "JSON nested deeper than " + std::to_string(kMaxDepth) + " levels";
    return r;
  }
  std::string error;
  if (try_parse(line, r.value, &error)) {
    r.status = JsonlLine::Status::ok;
    return r;
  }
  long count = 0;
  std::string repaired = repair_json_text(line, &count);
  if (count > 0 && try_parse(repaired, r.value, nullptr)) {
    r.status = JsonlLine::Status::repaired;
    r.replacements = count;
    return r;
  }
  r.value = nullptr;
  r.status = JsonlLine::Status::invalid;
  r.error = "invalid JSON: " + error;
  return r;
}

json JsonlStats::to_json() const {
  json skipped_lines = json::array();
  for (const auto& s : skips) skipped_lines.push_back({{"line", s.line}, {"reason", s.reason}});
  return {{"path", path},
          {"lines", lines},
          {"records", records},
          {"skipped", skipped},
          {"repaired", repaired},
          {"replacements", replacements},
          {"skipped_lines", skipped_lines}};
}

std::string JsonlStats::summary() const {
  std::string s = std::to_string(records) + (records == 1 ? " record" : " records");
  if (skipped > 0) {
    s += ", " + std::to_string(skipped) + (skipped == 1 ? " line skipped" : " lines skipped");
    if (!skips.empty()) {
      s += " (";
      for (size_t k = 0; k < skips.size() && k < 3; ++k) {
        if (k) s += "; ";
        s += "line " + std::to_string(skips[k].line) + ": " + skips[k].reason.substr(0, 80);
      }
      if (skips.size() > 3 || static_cast<long>(skips.size()) < skipped) s += "; ...";
      s += ")";
    }
  }
  if (repaired > 0)
    s += ", " + std::to_string(repaired) + " repaired (" + std::to_string(replacements) +
         " characters replaced by U+FFFD)";
  return s;
}

void JsonlStats::merge(const JsonlStats& other) {
  lines += other.lines;
  records += other.records;
  skipped += other.skipped;
  repaired += other.repaired;
  replacements += other.replacements;
  for (const auto& s : other.skips) {
    if (skips.size() >= 100) break;
    JsonlSkip k = s;
    if (!other.path.empty() && other.path != path) k.reason = other.path + ": " + k.reason;
    skips.push_back(std::move(k));
  }
  if (path.empty()) path = other.path;
}

JsonlStats read_jsonl(const std::string& path, const JsonlOptions& options,
                      const std::function<void(const json&, long)>& fn) {
  return read_jsonl_indexed(path, options,
                            [&](const json& record, long line, long) { fn(record, line); });
}

JsonlStats read_jsonl_indexed(const std::string& path, const JsonlOptions& options,
                              const std::function<void(const json&, long, long)>& fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string("cannot open: ") + std::strerror(errno)).file(path);
  JsonlStats stats;
  stats.path = path;
  LineReader reader(in);
  std::string line;
  bool too_long = false;
  long number = 0;
  auto skip = [&](const std::string& reason) {
    if (options.strict) throw Error(reason).file(path).line(number);
    ++stats.skipped;
    if (stats.skips.size() < options.max_reported) stats.skips.push_back({number, reason});
  };
  while (reader.next(line, options.max_line_bytes, too_long)) {
    ++number;
    if (too_long) {
      ++stats.lines;
      skip("line longer than " + std::to_string(options.max_line_bytes) + " bytes");
      continue;
    }
    JsonlLine parsed = parse_jsonl_line(line);
    if (parsed.status == JsonlLine::Status::blank) continue;
    ++stats.lines;
    if (parsed.status == JsonlLine::Status::invalid) {
      skip(parsed.error);
      continue;
    }
    try {
      fn(parsed.value, number, stats.lines - 1);
    } catch (const Error& e) {
      if (options.strict) {
        Error located = e;
        if (located.file_name().empty()) located.file(path);
        if (located.line_number() == 0) located.line(number);
        throw located;
      }
      std::string reason = e.message();
      if (!e.field_name().empty()) reason = "field '" + e.field_name() + "': " + reason;
      skip(printable(reason));
      continue;
    } catch (const json::exception& e) {
      skip("bad record: " + printable(e.what()));
      continue;
    }
    ++stats.records;
    if (parsed.status == JsonlLine::Status::repaired) {
      ++stats.repaired;
      stats.replacements += parsed.replacements;
    }
  }
  return stats;
}

}  // namespace trex
