#pragma once
// DeepSeek-V4's non-thinking chat format (spec §5): the token encoding shared by
// the SFT loader (train) and the generator's prompts (infer).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/io/tokenizer.hpp"

namespace trex::io {

// Label of a token that carries no loss (PyTorch's ignore_index).
constexpr int32_t kIgnoredLabel = -100;

// One encoded conversation; labels[t] = tokens[t] where trained, −100 elsewhere.
struct EncodedChat {
  std::vector<int32_t> tokens;
  std::vector<int32_t> labels;
};

// Non-thinking mode:  BOS {system} <｜User｜>{user} <｜Assistant｜></think>{answer}<EOS> …
// (system content raw; `<｜Assistant｜></think>` opens every assistant turn). The
// trained tokens are each assistant answer and its EOS (when `all_turns` is
// false, only the last assistant turn's). Text is tokenised piece by piece with the
// tokenizer's added-token splitting, so the ids equal those of tokenising the rendered string
// (a literal "<｜User｜>" inside content becomes the special token, as with HF tokenizers).
// `messages` is the JSON array; errors name `origin` and the offending field
// (unknown role, non-string content, no assistant turn).
EncodedChat encode_chat(const Tokenizer& tokenizer, const nlohmann::json& messages,
                        const std::string& origin = "<messages>", bool all_turns = true);

// The prompt of a generation in the same format: `messages` (system / user /
// earlier assistant turns) rendered as encode_chat does, followed by the opening
// `<｜Assistant｜></think>` of the answer to generate (non-thinking mode).
std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const nlohmann::json& messages,
                                        const std::string& origin = "<messages>");

}  // namespace trex::io
