#include "trex/core/jsonl.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "trex/core/error.hpp"

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
    } catch (const json::parse_error& e) {
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

}  // namespace trex
