// Encoding arbitrary bytes with a DeepSeek-V3-style tokenizer (the real
// pre-tokenizer regexes, byte-level BPE, the V4 special tokens), and decoding.
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "trex/io/tokenizer.hpp"

#ifndef TREX_SOURCE_DIR
#error "TREX_SOURCE_DIR must name the source tree (for the tokenizer fixture)"
#endif

namespace {

const trex::io::Tokenizer& tokenizer() {
  static const trex::io::Tokenizer tok = trex::io::Tokenizer::load(
      std::string(TREX_SOURCE_DIR) + "/tests/fixtures/tokenizer/dsv3_style.tokenizer.json");
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const trex::io::Tokenizer& tok = tokenizer();
  const std::string_view text = trex::fuzz::as_text(data, size);
  trex::fuzz::expect_only_trex_errors([&] {
    const std::vector<int32_t> ids = tok.encode(text);
    for (int32_t id : ids)
      trex::fuzz::check(id >= 0 && id < tok.vocab_size(), "id outside the vocab");
    // Byte-level BPE is lossless: decoding gives back the text (as
    // from_utf8_lossy, so exactly the text when it is valid UTF-8).
    const std::string decoded = tok.decode(ids);
    trex::fuzz::check(decoded == trex::io::unicode::utf8_lossy(text),
                      "decode(encode(text)) != text");
    std::string joined;
    for (const auto& piece : tok.pre_tokenize(text)) joined += piece;
    (void)joined;
  });
  return 0;
}
