#include "trex/io/chat.hpp"

#include "trex/core/error.hpp"

namespace trex::io {
namespace {

int32_t require_special(int32_t id, const char* name, const std::string& origin) {
  if (id < 0) throw Error(std::string("the tokenizer has no ") + name + " token").file(origin);
  return id;
}

}  // namespace

EncodedChat encode_chat(const Tokenizer& tokenizer, const nlohmann::json& messages,
                        const std::string& origin, bool all_turns) {
  const SpecialTokenIds& special = tokenizer.special_ids();
  const int32_t bos = require_special(special.bos, "BOS", origin);
  const int32_t eos = require_special(special.eos, "EOS", origin);
  const int32_t user = require_special(special.user, "<｜User｜>", origin);
  const int32_t assistant = require_special(special.assistant, "<｜Assistant｜>", origin);
  const int32_t end_think = require_special(special.end_think, "</think>", origin);
  if (!messages.is_array() || messages.empty())
    throw Error("expected a non-empty array of messages").file(origin).field("messages");

  EncodedChat out;
  auto append = [&](int32_t token, bool trained) {
    out.tokens.push_back(token);
    out.labels.push_back(trained ? token : kIgnoredLabel);
  };
  auto append_text = [&](const std::string& text, bool trained) {
    for (int32_t token : tokenizer.encode(text)) append(token, trained);
  };
  size_t last_assistant = messages.size();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string field = "messages[" + std::to_string(i) + "]";
    const nlohmann::json& message = messages[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
      throw Error("message without a string \"role\"").file(origin).field(field + ".role");
    if (!message.contains("content") || !message["content"].is_string())
      throw Error("message without a string \"content\"").file(origin).field(field + ".content");
    const std::string& role = message["role"].get_ref<const std::string&>();
    if (role != "system" && role != "user" && role != "assistant")
      throw Error("unknown role '" + role + "' (system, user or assistant)")
          .file(origin)
          .field(field + ".role");
    if (role == "assistant") last_assistant = i;
  }
  if (last_assistant == messages.size())
    throw Error("conversation has no assistant message to train on").file(origin).field("messages");

  append(bos, false);
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i]["role"].get_ref<const std::string&>();
    const std::string& content = messages[i]["content"].get_ref<const std::string&>();
    if (role == "system") {
      append_text(content, false);
    } else if (role == "user") {
      append(user, false);
      append_text(content, false);
    } else {
      const bool trained = all_turns || i == last_assistant;
      append(assistant, false);
      append(end_think, false);
      append_text(content, trained);
      append(eos, trained);
    }
  }
  return out;
}

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const nlohmann::json& messages,
                                        const std::string& origin) {
  if (!messages.is_array() || messages.empty())
    throw Error("expected a non-empty array of messages").file(origin).field("messages");
  // An empty final assistant turn renders `<｜Assistant｜></think><EOS>`; the
  // prompt is everything before that EOS.
  nlohmann::json with_answer = messages;
  with_answer.push_back({{"role", "assistant"}, {"content", ""}});
  std::vector<int32_t> tokens = encode_chat(tokenizer, with_answer, origin).tokens;
  tokens.pop_back();
  return tokens;
}

}  // namespace trex::io
