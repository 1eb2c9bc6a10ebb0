#include "trex/io/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <queue>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"

namespace trex::io {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the other 68 bytes
// (controls, space, 0x7F-0xA0, 0xAD) map to U+0100.. in byte order.
struct ByteLevelMap {
  std::array<char32_t, 256> byte_to_char{};
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  ByteLevelMap() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_char[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
      char_to_byte[byte_to_char[static_cast<std::size_t>(b)]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelMap& byte_level() {
  static const ByteLevelMap map;
  return map;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) unicode::append_utf8(byte_level().byte_to_char[b], out);
  return out;
}

// `tokenizers`' ByteLevel decoder, per token: every character maps back to its byte, or (when
// one does not, e.g. "｜" in a special token) the token's own UTF-8 bytes.
std::string byte_level_to_bytes(std::string_view token) {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  unicode::decode_utf8(token, cps, offsets);
  std::string out;
  for (char32_t cp : cps) {
    auto it = byte_level().char_to_byte.find(cp);
    if (it == byte_level().char_to_byte.end()) return std::string(token);
    out += static_cast<char>(it->second);
  }
  return out;
}

const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitStep {
  Regex regex;
  SplitBehavior behavior;
  bool invert;
};

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::strchr("\\^$.|?*+()[]{}-", c) != nullptr && c != '\0') out += '\\';
    out += c;
  }
  return out;
}

Error bad(const std::string& origin, const std::string& field, const std::string& what) {
  Error e(what);
  e.file(origin);
  e.field(field);
  return e;
}

struct Segment {
  uint32_t begin, end;
  int32_t id;  // added token id, or -1 for plain text
};

// Added tokens of one matching pass, leftmost-longest (as the aho-corasick automaton in
// `tokenizers` with MatchKind::LeftmostLongest).
struct AddedMatcher {
  std::array<std::vector<std::pair<std::string, int32_t>>, 256> by_first_byte;
  bool empty = true;

  void add(const std::string& content, int32_t id) {
    if (content.empty()) return;
    auto& list = by_first_byte[static_cast<unsigned char>(content[0])];
    list.emplace_back(content, id);
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    empty = false;
  }

  void split(std::string_view text, std::vector<Segment>& segments) const {
    if (empty) return;
    std::vector<Segment> out;
    for (const Segment& seg : segments) {
      if (seg.id >= 0) {
        out.push_back(seg);
        continue;
      }
      uint32_t plain_start = seg.begin;
      uint32_t pos = seg.begin;
      while (pos < seg.end) {
        const auto& candidates = by_first_byte[static_cast<unsigned char>(text[pos])];
        const std::pair<std::string, int32_t>* hit = nullptr;
        for (const auto& cand : candidates) {
          if (cand.first.size() <= seg.end - pos &&
              std::memcmp(text.data() + pos, cand.first.data(), cand.first.size()) == 0) {
            hit = &cand;
            break;
          }
        }
        if (hit == nullptr) {
          ++pos;
          continue;
        }
        if (pos > plain_start) out.push_back({plain_start, pos, -1});
        const uint32_t end = pos + static_cast<uint32_t>(hit->first.size());
        out.push_back({pos, end, hit->second});
        pos = plain_start = end;
      }
      if (seg.end > plain_start) out.push_back({plain_start, seg.end, -1});
    }
    segments = std::move(out);
  }
};

}  // namespace

std::vector<std::string> default_special_tokens() {
  return {std::string(kBosToken),     std::string(kEosToken),       std::string(kPadToken),
          std::string(kUserToken),    std::string(kAssistantToken), std::string(kThinkToken),
          std::string(kEndThinkToken)};
}

ordered_json deepseek_v3_pre_tokenizer_json(bool split_digits_individually, bool bare_words) {
  const std::string words =
      bare_words ? "[\\p{L}\\p{M}]+"
                 : "[!\"#$%&'()*+,\\-./"
                   ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+";
  const std::string patterns[3] = {
      split_digits_individually ? "\\p{N}" : "\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
      words + "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
  ordered_json steps = ordered_json::array();
  for (const std::string& p : patterns) {
    ordered_json split;
    split["type"] = "Split";
    split["pattern"] = {{"Regex", p}};
    split["behavior"] = "Isolated";
    split["invert"] = false;
    steps.push_back(split);
  }
  ordered_json byte_level_step;
  byte_level_step["type"] = "ByteLevel";
  byte_level_step["add_prefix_space"] = false;
  byte_level_step["trim_offsets"] = true;
  byte_level_step["use_regex"] = false;
  steps.push_back(byte_level_step);
  ordered_json out;
  out["type"] = "Sequence";
  out["pretokenizers"] = steps;
  return out;
}

struct Tokenizer::Impl {
  struct MergeInfo {
    int32_t rank;
    int32_t new_id;
  };

  // BPE model
  std::vector<std::string> id_to_token;  // "" where no token has that id
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<std::string, int32_t> bytes_to_id;  // decoded bytes -> id (ignore_merges)
  std::unordered_map<uint64_t, MergeInfo> merges;
  std::vector<std::pair<int32_t, int32_t>> merge_list;
  std::array<int32_t, 256> byte_ids{};
  int32_t unk_id = -1;
  bool ignore_merges = false;
  ordered_json model_options;

  // Added tokens
  std::vector<AddedToken> added;
  std::unordered_map<std::string, int32_t> added_to_id;
  std::unordered_map<int32_t, std::size_t> added_index;
  AddedMatcher match_non_normalized, match_normalized;

  // Pre-tokenizer, post-processor, decoder
  std::vector<SplitStep> splits;
  std::vector<int32_t> template_prefix, template_suffix;
  bool byte_level_decoder = true;
  std::vector<std::string> id_bytes;  // what each id decodes to (ByteLevel decoder, per token)
  ordered_json normalizer_json, pre_tokenizer_json, post_processor_json, decoder_json;

  SpecialTokenIds specials;
  std::string origin;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
  static constexpr std::size_t kCacheCapacity = 200000;

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  int32_t model_id(std::string_view token) const {
    auto it = vocab.find(std::string(token));
    return it == vocab.end() ? -1 : it->second;
  }

  void parse_model(const json& model);
  void parse_added(const json& list);
  void parse_pre_tokenizer(const json& node, const std::string& field, bool& has_byte_level);
  void parse_post_processor(const json& node, const std::string& field);
  void finish();

  std::vector<std::pair<uint32_t, uint32_t>> pre_tokenize_segment(std::string_view text) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view piece, std::vector<int32_t>& out) const;
  std::vector<Segment> split_added(std::string_view text) const;
};

void Tokenizer::Impl::parse_model(const json& model) {
  if (!model.is_object()) throw bad(origin, "model", "missing model object");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") throw bad(origin, "model.type", "only BPE models are supported, got " + type);
  auto null_or = [&](const char* key, auto pred) {
    return !model.contains(key) || model[key].is_null() || pred(model[key]);
  };
  if (!null_or("dropout", [](const json& v) { return v.is_number() && v.get<double>() == 0.0; }))
    throw bad(origin, "model.dropout", "BPE dropout is not supported");
  if (!null_or("continuing_subword_prefix",
               [](const json& v) { return v.is_string() && v.get<std::string>().empty(); }))
    throw bad(origin, "model.continuing_subword_prefix", "subword prefixes are not supported");
  if (!null_or("end_of_word_suffix",
               [](const json& v) { return v.is_string() && v.get<std::string>().empty(); }))
    throw bad(origin, "model.end_of_word_suffix", "end-of-word suffixes are not supported");
  if (!null_or("byte_fallback", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }))
    throw bad(origin, "model.byte_fallback",
              "byte_fallback is not supported (byte-level BPE needs none)");
  ignore_merges = model.contains("ignore_merges") && model["ignore_merges"].is_boolean() &&
                  model["ignore_merges"].get<bool>();
  for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                          "fuse_unk", "byte_fallback", "ignore_merges"}) {
    model_options[key] = model.contains(key) ? ordered_json(model[key]) : ordered_json(nullptr);
  }
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw bad(origin, "model.vocab", "missing vocab object");
  int32_t max_id = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX)
      throw bad(origin, "model.vocab." + it.key(), "token id must be a non-negative integer");
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    vocab[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  id_to_token.assign(static_cast<std::size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : vocab) {
    if (!id_to_token[static_cast<std::size_t>(id)].empty())
      throw bad(origin, "model.vocab." + token, "id " + std::to_string(id) + " is used twice");
    id_to_token[static_cast<std::size_t>(id)] = token;
    bytes_to_id.emplace(byte_level_to_bytes(token), id);
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    unk_id = model_id(model["unk_token"].get<std::string>());
    if (unk_id < 0) throw bad(origin, "model.unk_token", "unk_token is not in the vocabulary");
  }
  const json& merge_array = model.contains("merges") ? model["merges"] : json::array();
  if (!merge_array.is_array()) throw bad(origin, "model.merges", "merges must be an array");
  int32_t rank = 0;
  for (const json& m : merge_array) {
    std::string a, b;
    const std::string field = "model.merges[" + std::to_string(rank) + "]";
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        throw bad(origin, field, "merge \"" + s + "\" is not two tokens separated by one space");
      a = s.substr(0, space), b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      throw bad(origin, field, "merge must be \"a b\" or [a, b]");
    }
    const int32_t ia = model_id(a), ib = model_id(b), inew = model_id(a + b);
    if (ia < 0 || ib < 0 || inew < 0)
      throw bad(origin, field,
                "merge \"" + a + " " + b + "\" uses a token that is not in the vocabulary");
    // A repeated pair keeps its first (best) rank, as in `tokenizers`.
    merges.emplace(pair_key(ia, ib), MergeInfo{rank, inew});
    merge_list.emplace_back(ia, ib);
    ++rank;
  }
  const ByteLevelMap& map = byte_level();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    unicode::append_utf8(map.byte_to_char[static_cast<std::size_t>(b)], ch);
    byte_ids[static_cast<std::size_t>(b)] = model_id(ch);
  }
}

void Tokenizer::Impl::parse_added(const json& list) {
  if (list.is_null()) return;
  if (!list.is_array()) throw bad(origin, "added_tokens", "added_tokens must be an array");
  for (std::size_t k = 0; k < list.size(); ++k) {
    const json& t = list[k];
    const std::string field = "added_tokens[" + std::to_string(k) + "]";
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string())
      throw bad(origin, field, "added token needs a string content");
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (t.contains(flag) && t[flag].is_boolean() && t[flag].get<bool>())
        throw bad(origin, field + "." + flag, std::string(flag) + " = true is not supported");
    }
    AddedToken token;
    token.content = t["content"].get<std::string>();
    token.special = t.value("special", false);
    token.normalized = t.value("normalized", !token.special);
    if (token.content.empty()) throw bad(origin, field, "empty added token");
    if (added_to_id.count(token.content)) continue;
    // `tokenizers` ignores the file's "id": a token in the model vocabulary keeps that id,
    // any other gets the next id after the vocabulary and the added tokens so far.
    int32_t id = model_id(token.content);
    if (id < 0) {
      const auto model_size = static_cast<int32_t>(vocab.size());
      int32_t max_added = -1;
      for (const AddedToken& a : added) max_added = std::max(max_added, a.id);
      id = (max_added < 0)
               ? model_size
               : (max_added >= model_size || model_size == 0 ? max_added + 1 : model_size);
    }
    token.id = id;
    added_to_id[token.content] = id;
    added_index[id] = added.size();
    added.push_back(token);
  }
}

void Tokenizer::Impl::parse_pre_tokenizer(const json& node, const std::string& field,
                                          bool& has_byte_level) {
  if (node.is_null()) return;
  const std::string type = node.value("type", std::string());
  if (type == "Sequence") {
    const json& steps = node.contains("pretokenizers") ? node["pretokenizers"] : json::array();
    for (std::size_t k = 0; k < steps.size(); ++k)
      parse_pre_tokenizer(steps[k], field + ".pretokenizers[" + std::to_string(k) + "]",
                          has_byte_level);
  } else if (type == "Split") {
    std::string pattern;
    const json& pat = node.contains("pattern") ? node["pattern"] : json();
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      pattern = pat["Regex"].get<std::string>();
    } else if (pat.contains("String") && pat["String"].is_string()) {
      pattern = regex_escape(pat["String"].get<std::string>());
    } else {
      throw bad(origin, field + ".pattern", "Split needs a Regex or String pattern");
    }
    const std::string behavior = node.value("behavior", std::string("Isolated"));
    SplitBehavior b;
    if (behavior == "Isolated") {
      b = SplitBehavior::kIsolated;
    } else if (behavior == "Removed") {
      b = SplitBehavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      b = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      b = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      b = SplitBehavior::kContiguous;
    } else {
      throw bad(origin, field + ".behavior", "unknown Split behavior " + behavior);
    }
    try {
      splits.push_back({Regex(pattern), b, node.value("invert", false)});
    } catch (Error& e) {
      e.file(origin);
      e.field(field + ".pattern");
      throw;
    }
  } else if (type == "ByteLevel") {
    if (node.value("add_prefix_space", false))
      throw bad(origin, field + ".add_prefix_space",
                "ByteLevel add_prefix_space = true is not supported");
    if (node.value("use_regex", true))
      splits.push_back({Regex(kGpt2Pattern), SplitBehavior::kIsolated, false});
    has_byte_level = true;
  } else if (type == "Digits") {
    const bool individual = node.value("individual_digits", false);
    splits.push_back({Regex("\\p{N}"),
                      individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false});
  } else {
    throw bad(origin, field + ".type", "unsupported pre-tokenizer type \"" + type + "\"");
  }
}

void Tokenizer::Impl::parse_post_processor(const json& node, const std::string& field) {
  if (node.is_null()) return;
  const std::string type = node.value("type", std::string());
  if (type == "ByteLevel") return;  // offsets only; ids unchanged
  if (type == "Sequence") {
    const json& steps = node.contains("processors") ? node["processors"] : json::array();
    for (std::size_t k = 0; k < steps.size(); ++k)
      parse_post_processor(steps[k], field + ".processors[" + std::to_string(k) + "]");
    return;
  }
  if (type != "TemplateProcessing")
    throw bad(origin, field + ".type", "unsupported post-processor type \"" + type + "\"");
  if (!node.contains("single") || !node["single"].is_array())
    throw bad(origin, field + ".single", "missing template");
  bool after_sequence = false;
  for (const json& item : node["single"]) {
    if (item.contains("Sequence")) {
      after_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item["SpecialToken"].value("id", std::string());
      const json& table = node.contains("special_tokens") ? node["special_tokens"] : json::object();
      if (!table.contains(name) || !table[name].contains("ids"))
        throw bad(origin, field + ".special_tokens", "template token " + name + " has no ids");
      for (const json& id : table[name]["ids"])
        (after_sequence ? template_suffix : template_prefix).push_back(id.get<int32_t>());
    } else {
      throw bad(origin, field + ".single", "unknown template item");
    }
  }
}

void Tokenizer::Impl::finish() {
  int64_t size = static_cast<int64_t>(id_to_token.size());
  for (const AddedToken& t : added) size = std::max<int64_t>(size, int64_t{t.id} + 1);
  id_bytes.assign(static_cast<std::size_t>(size), std::string());
  for (std::size_t id = 0; id < id_to_token.size(); ++id) {
    if (!id_to_token[id].empty())
      id_bytes[id] = byte_level_decoder ? byte_level_to_bytes(id_to_token[id]) : id_to_token[id];
  }
  for (const AddedToken& t : added) {
    id_bytes[static_cast<std::size_t>(t.id)] =
        byte_level_decoder ? byte_level_to_bytes(t.content) : t.content;
    (t.normalized ? match_normalized : match_non_normalized).add(t.content, t.id);
  }
  auto find = [&](std::string_view s) {
    auto it = added_to_id.find(std::string(s));
    if (it != added_to_id.end()) return it->second;
    return model_id(s);
  };
  specials.bos = find(kBosToken);
  specials.eos = find(kEosToken);
  specials.pad = find(kPadToken);
  specials.user = find(kUserToken);
  specials.assistant = find(kAssistantToken);
  specials.think = find(kThinkToken);
  specials.end_think = find(kEndThinkToken);
}

// ----------------------------------------------------------------------------------------------
// Encoding

std::vector<Segment> Tokenizer::Impl::split_added(std::string_view text) const {
  std::vector<Segment> segments;
  if (!text.empty()) segments.push_back({0, static_cast<uint32_t>(text.size()), -1});
  match_non_normalized.split(text, segments);
  match_normalized.split(text, segments);
  return segments;
}

std::vector<std::pair<uint32_t, uint32_t>> Tokenizer::Impl::pre_tokenize_segment(
    std::string_view text) const {
  thread_local std::vector<char32_t> cps;
  thread_local std::vector<uint32_t> offsets;
  unicode::decode_utf8(text, cps, offsets);
  std::vector<std::pair<uint32_t, uint32_t>> pieces;  // code point ranges
  if (!cps.empty()) pieces.emplace_back(0, static_cast<uint32_t>(cps.size()));
  std::vector<std::pair<uint32_t, uint32_t>> next;
  std::vector<std::pair<std::pair<uint32_t, uint32_t>, bool>> parts;
  for (const SplitStep& step : splits) {
    next.clear();
    for (const auto& [pb, pe] : pieces) {
      parts.clear();
      uint32_t prev = pb;
      for (const auto& [mb, me] : step.regex.find_all(cps.data() + pb, pe - pb)) {
        if (pb + mb > prev) parts.push_back({{prev, pb + mb}, false});
        parts.push_back({{pb + mb, pb + me}, true});
        prev = pb + me;
      }
      if (pe > prev) parts.push_back({{prev, pe}, false});
      if (step.invert) {
        for (auto& part : parts) part.second = !part.second;
      }
      const std::size_t first = next.size();
      switch (step.behavior) {
        case SplitBehavior::kIsolated:
          for (const auto& part : parts) next.push_back(part.first);
          break;
        case SplitBehavior::kRemoved:
          for (const auto& part : parts)
            if (!part.second) next.push_back(part.first);
          break;
        case SplitBehavior::kMergedWithPrevious: {
          bool previous_match = false;
          for (const auto& part : parts) {
            if (part.second && !previous_match && next.size() > first) {
              next.back().second = part.first.second;
            } else {
              next.push_back(part.first);
            }
            previous_match = part.second;
          }
          break;
        }
        case SplitBehavior::kMergedWithNext: {
          bool previous_match = false;
          std::vector<std::pair<uint32_t, uint32_t>> reversed;
          for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
            if (it->second && !previous_match && !reversed.empty()) {
              reversed.back().first = it->first.first;
            } else {
              reversed.push_back(it->first);
            }
            previous_match = it->second;
          }
          next.insert(next.end(), reversed.rbegin(), reversed.rend());
          break;
        }
        case SplitBehavior::kContiguous: {
          bool previous_match = false;
          for (const auto& part : parts) {
            if (part.second == previous_match && next.size() > first) {
              next.back().second = part.first.second;
            } else {
              next.push_back(part.first);
            }
            previous_match = part.second;
          }
          break;
        }
      }
    }
    pieces.swap(next);
  }
  for (auto& piece : pieces) piece = {offsets[piece.first], offsets[piece.second]};
  return pieces;
}

// `tokenizers`' Word::merge_all: a heap of candidate merges ordered by (rank, position); a popped
// candidate is applied only if its two symbols are still adjacent and still form that merge.
void Tokenizer::Impl::bpe_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = bytes_to_id.find(std::string(piece));
    if (it != bytes_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (unsigned char b : piece) {
    int32_t id = byte_ids[b];
    if (id < 0) id = unk_id;
    if (id < 0) continue;  // no unk token: the byte is dropped, as in `tokenizers`
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[static_cast<std::size_t>(left)].next;
    if (right < 0) return;
    auto it = merges.find(pair_key(symbols[static_cast<std::size_t>(left)].id,
                                   symbols[static_cast<std::size_t>(right)].id));
    if (it != merges.end()) heap.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(symbols.size()); ++k) push_pair(k);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    auto it = merges.find(pair_key(left.id, right.id));
    if (it == merges.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols)
    if (s.alive) out.push_back(s.id);
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(key);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t start = out.size();
  bpe_uncached(piece, out);
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() < kCacheCapacity)
    cache.emplace(
        key, std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
}

// ----------------------------------------------------------------------------------------------
// Tokenizer

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string text = read_file(path);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(std::string("invalid JSON: ") + e.what()).file(path);
  }
  return from_json(doc, path);
}

Tokenizer Tokenizer::from_json(const json& doc, const std::string& origin) {
  Tokenizer tok;
  Impl& im = *tok.impl_;
  im.origin = origin;
  if (!doc.is_object()) throw bad(origin, "", "tokenizer.json must be an object");
  try {
    if (doc.contains("normalizer") && !doc["normalizer"].is_null()) {
      const json& n = doc["normalizer"];
      const bool empty_sequence = n.value("type", std::string()) == "Sequence" &&
                                  n.contains("normalizers") && n["normalizers"].is_array() &&
                                  n["normalizers"].empty();
      if (!empty_sequence)
        throw bad(origin, "normalizer",
                  "normalizers are not supported (DeepSeek's tokenizer has none)");
      im.normalizer_json = n;
    }
    im.parse_model(doc.contains("model") ? doc["model"] : json());
    im.parse_added(doc.contains("added_tokens") ? doc["added_tokens"] : json());
    bool has_byte_level = false;
    if (doc.contains("pre_tokenizer")) {
      im.parse_pre_tokenizer(doc["pre_tokenizer"], "pre_tokenizer", has_byte_level);
      im.pre_tokenizer_json = doc["pre_tokenizer"];
    }
    if (!has_byte_level)
      throw bad(origin, "pre_tokenizer", "a ByteLevel pre-tokenizer is required (byte-level BPE)");
    if (doc.contains("post_processor")) {
      im.parse_post_processor(doc["post_processor"], "post_processor");
      im.post_processor_json = doc["post_processor"];
    }
    const json& decoder = doc.contains("decoder") ? doc["decoder"] : json();
    if (decoder.is_null()) {
      im.byte_level_decoder = false;
    } else if (decoder.value("type", std::string()) != "ByteLevel") {
      throw bad(origin, "decoder.type", "only the ByteLevel decoder is supported");
    }
    im.decoder_json = decoder;
  } catch (const json::exception& e) {
    throw bad(origin, "", std::string("malformed tokenizer.json: ") + e.what());
  }
  im.finish();
  return tok;
}

ordered_json Tokenizer::to_json() const {
  const Impl& im = *impl_;
  ordered_json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  ordered_json added = ordered_json::array();
  for (const AddedToken& t : im.added) {
    ordered_json e;
    e["id"] = t.id;
    e["content"] = t.content;
    e["single_word"] = false;
    e["lstrip"] = false;
    e["rstrip"] = false;
    e["normalized"] = t.normalized;
    e["special"] = t.special;
    added.push_back(e);
  }
  doc["added_tokens"] = added;
  doc["normalizer"] = im.normalizer_json;
  doc["pre_tokenizer"] = im.pre_tokenizer_json;
  doc["post_processor"] = im.post_processor_json;
  doc["decoder"] = im.decoder_json;
  ordered_json model;
  model["type"] = "BPE";
  for (auto it = im.model_options.begin(); it != im.model_options.end(); ++it)
    model[it.key()] = it.value();
  ordered_json vocab = ordered_json::object();
  for (std::size_t id = 0; id < im.id_to_token.size(); ++id) {
    if (!im.id_to_token[id].empty()) vocab[im.id_to_token[id]] = id;
  }
  model["vocab"] = vocab;
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : im.merge_list)
    merges.push_back(
        {im.id_to_token[static_cast<std::size_t>(a)], im.id_to_token[static_cast<std::size_t>(b)]});
  model["merges"] = merges;
  doc["model"] = model;
  return doc;
}

void Tokenizer::save(const std::string& path) const {
  ensure_parent_dir(path);
  write_file_atomic(path, to_json().dump() + "\n");
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& im = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens)
    ids.insert(ids.end(), im.template_prefix.begin(), im.template_prefix.end());
  for (const Segment& seg : im.split_added(text)) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
    for (const auto& [b, e] : im.pre_tokenize_segment(part)) im.bpe(part.substr(b, e - b), ids);
  }
  if (add_special_tokens)
    ids.insert(ids.end(), im.template_suffix.begin(), im.template_suffix.end());
  return ids;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (const Segment& seg : impl_->split_added(text)) {
    if (seg.id >= 0) continue;
    const std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
    for (const auto& [b, e] : impl_->pre_tokenize_segment(part))
      out.emplace_back(part.substr(b, e - b));
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& im = *impl_;
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= im.id_bytes.size()) continue;
    const auto added = im.added_index.find(id);
    const bool is_added = added != im.added_index.end();
    if (!is_added && (static_cast<std::size_t>(id) >= im.id_to_token.size() ||
                      im.id_to_token[static_cast<std::size_t>(id)].empty()))
      continue;
    if (skip_special_tokens && is_added && im.added[added->second].special) continue;
    if (!im.byte_level_decoder && !first) bytes += ' ';  // no decoder: tokens joined by spaces
    bytes += im.id_bytes[static_cast<std::size_t>(id)];
    first = false;
  }
  return im.byte_level_decoder ? unicode::utf8_lossy(bytes) : bytes;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_to_id.find(std::string(token));
  if (it != impl_->added_to_id.end()) return it->second;
  const int32_t id = impl_->model_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const Impl& im = *impl_;
  auto added = im.added_index.find(id);
  if (added != im.added_index.end()) return im.added[added->second].content;
  if (id < 0 || static_cast<std::size_t>(id) >= im.id_to_token.size() ||
      im.id_to_token[static_cast<std::size_t>(id)].empty())
    throw Error("token id " + std::to_string(id) + " is not in the vocabulary").file(im.origin);
  return im.id_to_token[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  auto added = impl_->added_index.find(id);
  return added != impl_->added_index.end() && impl_->added[added->second].special;
}

int64_t Tokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->id_bytes.size());
}
int64_t Tokenizer::merge_count() const {
  return static_cast<int64_t>(impl_->merge_list.size());
}
const SpecialTokenIds& Tokenizer::special_ids() const {
  return impl_->specials;
}
const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added;
}

// Exposed for the trainer (tokenizer_train.cpp).
std::string byte_level_token(std::string_view bytes) {
  return bytes_to_byte_level(bytes);
}

}  // namespace trex::io
