// The JSON Lines reader (datasets, eval records), and the compact writer's
// round trip: a record read, written back with dump_compact and read again is
// the same value.
#include "fuzz_common.hpp"
#include "trex/core/jsonl.hpp"

namespace {

void read_records(const std::string& path) {
  long last = 0;
  trex::read_jsonl(path, [&](const trex::json& record, long line) {
    trex::fuzz::check(line > last, "line numbers do not increase");
    last = line;
    const std::string line_text = trex::dump_compact(record);
    trex::fuzz::check(line_text.find('\n') == std::string::npos, "a record spans lines");
    trex::fuzz::check(trex::json::parse(line_text) == record,
                      "a record does not survive dump_compact");
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trex::fuzz::write_scratch("data.jsonl", data, size);
  trex::fuzz::expect_only_trex_errors([&] {
    try {
      read_records(path);
    } catch (const nlohmann::json::out_of_range& e) {
      // Known, reported: read_jsonl catches only json::parse_error, so a number
      // beyond the double range (1e999: out_of_range 406) escapes as a non-trex
      // error (regression input fuzz/regressions/jsonl/number-overflow-406).
      // Tolerated here until the reader is fixed, so fuzzing can go on.
      if (e.id != 406) throw;
    }
  });
  return 0;
}
