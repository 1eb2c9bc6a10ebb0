// tokenizer.json loading (BPE model, pre-tokenizer regexes, added tokens,
// post-processor), then encoding and decoding with what was loaded.
// Input: the tokenizer.json text, optionally followed by a NUL byte and a text
// to encode (raw JSON text never contains NUL).
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "trex/io/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const void* nul = std::memchr(data, 0, size);
  const size_t json_size =
      nul ? static_cast<size_t>(static_cast<const uint8_t*>(nul) - data) : size;
  const std::string text =
      nul ? std::string(trex::fuzz::as_text(data + json_size + 1, size - json_size - 1))
          : std::string("Hello world 123 <think>x</think> ÿ\n");
  const std::string path = trex::fuzz::write_scratch("tokenizer.json", data, json_size);
  trex::fuzz::expect_only_trex_errors([&] {
    const trex::io::Tokenizer tok = trex::io::Tokenizer::load(path);
    const int64_t vocab = tok.vocab_size();
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, special);
      for (int32_t id : ids) {
        trex::fuzz::check(id >= 0 && id < vocab, "encode() produced an id outside the vocab");
        trex::fuzz::expect_only_trex_errors([&] { (void)tok.id_to_token(id); });
      }
      (void)tok.decode(ids, false);
      (void)tok.decode(ids, true);
    }
    (void)tok.pre_tokenize(text);
    const int32_t odd[] = {-1, 0, 1, 255, 256, 1 << 30};
    (void)tok.decode(odd, false);
    // What save() writes must load again and encode the same way.
    const std::string saved = tok.to_json().dump();
    const trex::io::Tokenizer again =
        trex::io::Tokenizer::from_json(nlohmann::json::parse(saved), "saved");
    trex::fuzz::check(again.encode(text) == tok.encode(text),
                      "the saved tokenizer encodes differently");
    trex::fuzz::check(again.vocab_size() == vocab, "the saved tokenizer has another vocab size");
  });
  return 0;
}
