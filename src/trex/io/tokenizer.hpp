#pragma once
// Byte-level BPE tokenizer compatible with HF `tokenizers` (tokenizer.json) for the DeepSeek-V3 /
// V4 family: load / save / encode / decode exactly like the Python library, and training of a
// new vocabulary with the V4 special tokens. See docs/tokenizer.md.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/io/tokenizer_regex.hpp"

namespace trex::io {

// The DeepSeek-V4 special tokens ("｜" is U+FF5C, "▁" is U+2581; spec §5).
inline constexpr std::string_view kBosToken = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEosToken = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kPadToken = "<｜▁pad▁｜>";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kThinkToken = "<think>";
inline constexpr std::string_view kEndThinkToken = "</think>";
// In this order they get ids 0..6 in a trained tokenizer (BOS 0, EOS 1 as in V4).
std::vector<std::string> default_special_tokens();

// The DeepSeek-V3 tokenizer.json pre-tokenizer: Split(\p{N}{1,3}) , Split(CJK / kana runs),
// Split(letters / punctuation / whitespace), ByteLevel(add_prefix_space false, use_regex false).
// With `split_digits_individually` the first pattern is \p{N} (every digit its own pre-token).
// With `bare_words` a word pre-token carries no leading space or punctuation (the space is its
// own token), so a name written `pale ale` in a question and `pale_ale` in a model shares the
// tokens `pale` and `ale`: copying it is an identity over token ids, not a learned map from
// ` ale` to `_ale` per word. Costs one token per space before a word.
nlohmann::ordered_json deepseek_v3_pre_tokenizer_json(bool split_digits_individually = false,
                                                      bool bare_words = false);

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool normalized = false;
};

// Ids of the V4 special tokens in a tokenizer, -1 when absent.
struct SpecialTokenIds {
  int32_t bos = -1, eos = -1, pad = -1, user = -1, assistant = -1, think = -1, end_think = -1;
};

struct TokenizerTrainOptions {
  int64_t vocab_size = 8000;  // including special tokens and the 256 byte tokens
  int64_t min_frequency = 2;  // a pair seen fewer times is never merged
  bool split_digits_individually = false;
  bool bare_words = false;  // see deepseek_v3_pre_tokenizer_json
  std::vector<std::string> special_tokens = default_special_tokens();
  bool show_progress = true;
};

class Tokenizer {
 public:
  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Reads an HF tokenizer.json (BPE model, byte-level). Unsupported components -> trex::Error.
  static Tokenizer load(const std::string& path);
  static Tokenizer from_json(const nlohmann::json& doc, const std::string& origin = "<json>");
  // Writes an HF tokenizer.json (merges in the [a, b] list form), atomically.
  void save(const std::string& path) const;
  nlohmann::ordered_json to_json() const;

  // Byte-level BPE training (see docs/tokenizer.md for the algorithm and tie-breaking).
  static Tokenizer train(const std::vector<std::string>& corpus_files,
                         const TokenizerTrainOptions& options);
  static Tokenizer train_from_texts(const std::vector<std::string>& texts,
                                    const TokenizerTrainOptions& options);

  // Like `tokenizers`' Tokenizer.encode(text).ids. `add_special_tokens` applies a
  // TemplateProcessing post-processor when the file has one (DeepSeek's has none).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Like Tokenizer.decode(ids, skip_special_tokens=...); ids that name no token are skipped.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  // The pre-tokens (byte strings) of a text without added tokens, for inspection and tests.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as in tokenizer.json (byte-level characters); throws when unknown.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // One more than the largest id (embedding rows needed).
  int64_t vocab_size() const;
  int64_t merge_count() const;
  const SpecialTokenIds& special_ids() const;
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trex::io
