// The completion extractor of the OR eval harness: arbitrary model output in,
// the code to run (or the reason there is none) out. Input: one byte choosing
// the format hint, then the completion.
#include "fuzz_common.hpp"
#include "trex/or/eval/extract.hpp"

namespace {

using namespace trex::orlib::eval;

bool blank(const std::string& s) {
  return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const CodeKind kHints[] = {CodeKind::none, CodeKind::mathprog, CodeKind::lp,
                                    CodeKind::python};
  const CodeKind hint = kHints[data[0] % 4];
  const std::string_view completion = trex::fuzz::as_text(data + 1, size - 1);
  trex::fuzz::expect_only_trex_errors([&] {
    const Extraction ex = extract_code(completion, hint);
    if (ex.kind == CodeKind::none) {
      trex::fuzz::check(ex.code.empty(), "no kind but code");
      trex::fuzz::check(
          ex.failure == Category::no_code || ex.failure == Category::extraction_failed,
          "no kind but no failure category");
    } else {
      trex::fuzz::check(!blank(ex.code), "an extraction with blank code");
      trex::fuzz::check(!ex.method.empty(), "an extraction without a method");
    }
    trex::fuzz::check(ex.blocks >= 0, "negative block count");
    (void)sniff_code(completion, hint);
    const std::string normalized = normalize_mathprog(completion);
    trex::fuzz::check(normalize_mathprog(normalized) == normalized,
                      "normalize_mathprog is not idempotent");
    bool other = false;
    (void)kind_for_tag(completion.substr(0, 32), other);
    (void)parse_code_kind(completion.substr(0, 16));
  });
  return 0;
}
