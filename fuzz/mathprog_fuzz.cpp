// GNU MathProg text through the solver facade (LinearModel::from_mathprog).
//
// MathProg is a language, not a format: a valid model may loop for hours
// (`set S := 1..1e9;`) or allocate without bound while generating, exactly as
// under glpsol. The eval harness therefore translates completions in a
// sandboxed child with CPU and memory limits (or/eval/sandbox.cpp); here such
// inputs surface as libFuzzer timeouts / out-of-memory, which scripts/fuzz.sh
// runs past (fork mode, -ignore_timeouts -ignore_ooms) and counts, while
// crashes and sanitizer reports stop the run as for every target.
//
// Statements that write files (`printf ... > "file"`, `display ... >> "f"`,
// `table ... OUT`) are skipped: a fuzzer must not write files where a mutated
// name points. A `>` not followed by `=` (redirection, but also the `>` and
// `<>` comparisons) and the word `table` (which also reads files) make an
// input uninteresting; `>=` stays.
#include <cctype>

#include "solver_fuzz.hpp"

namespace {

bool may_touch_files(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '>' && (i + 1 == text.size() || text[i + 1] != '=')) return true;
  std::string lower(text.size(), ' ');
  for (size_t i = 0; i < text.size(); ++i)
    lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  return lower.find("table") != std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(trex::fuzz::as_text(data, size));
  if (may_touch_files(text)) return -1;  // not added to the corpus
  trex::fuzz::expect_only_trex_errors([&] {
    LinearModel model = LinearModel::from_mathprog(text, "model.mod");
    exercise(model);
  });
  return 0;
}
