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
  trex::fuzz::expect_only_trex_errors([&] { read_records(path); });
  return 0;
}
