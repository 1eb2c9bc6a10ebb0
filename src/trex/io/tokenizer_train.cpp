// Byte-level BPE training. The corpus is split into lines; special tokens are cut out; each line
// is pre-tokenized with the DeepSeek-V3 pre-tokenizer and the distinct pre-tokens are counted.
// Starting from the 256 byte tokens, the most frequent adjacent pair (summed over the word
// counts) is merged until the vocabulary has the requested size. Ties: the pair whose left id
// is smallest, then whose right id is smallest (ids are given in creation order: the special
// tokens, the 256 bytes in byte order, then merges), so training is deterministic.
#include <algorithm>
#include <optional>
#include <queue>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/progress.hpp"
#include "trex/io/tokenizer.hpp"

namespace trex::io {

std::string byte_level_token(std::string_view bytes);  // tokenizer.cpp

namespace {

using ordered_json = nlohmann::ordered_json;

struct PairHash {
  std::size_t operator()(uint64_t k) const {
    return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ull);
  }
};

uint64_t key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

ordered_json tokenizer_doc(const std::vector<std::string>& specials,
                           const std::vector<std::string>& tokens,
                           const std::vector<std::pair<std::string, std::string>>& merges,
                           bool split_digits, bool bare_words) {
  ordered_json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  ordered_json added = ordered_json::array();
  for (std::size_t k = 0; k < specials.size(); ++k) {
    ordered_json e;
    e["id"] = k;
    e["content"] = specials[k];
    e["single_word"] = false;
    e["lstrip"] = false;
    e["rstrip"] = false;
    e["normalized"] = false;
    e["special"] = true;
    added.push_back(e);
  }
  doc["added_tokens"] = added;
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = deepseek_v3_pre_tokenizer_json(split_digits, bare_words);
  doc["post_processor"] = nullptr;
  ordered_json decoder;
  decoder["type"] = "ByteLevel";
  decoder["add_prefix_space"] = true;
  decoder["trim_offsets"] = true;
  decoder["use_regex"] = true;
  doc["decoder"] = decoder;
  ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  ordered_json vocab = ordered_json::object();
  // Special tokens are in the model vocabulary too, so that `tokenizers` keeps their ids.
  for (std::size_t k = 0; k < specials.size(); ++k) vocab[specials[k]] = k;
  for (std::size_t k = 0; k < tokens.size(); ++k) vocab[tokens[k]] = specials.size() + k;
  model["vocab"] = vocab;
  ordered_json merge_list = ordered_json::array();
  for (const auto& [a, b] : merges) merge_list.push_back({a, b});
  model["merges"] = merge_list;
  doc["model"] = model;
  return doc;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    end = (end == std::string::npos) ? text.size() : end + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

}  // namespace

Tokenizer Tokenizer::train(const std::vector<std::string>& corpus_files,
                           const TokenizerTrainOptions& options) {
  std::vector<std::string> texts;
  for (const std::string& path : corpus_files) {
    for (std::string& line : split_lines(read_file(path))) texts.push_back(std::move(line));
  }
  return train_from_texts(texts, options);
}

Tokenizer Tokenizer::train_from_texts(const std::vector<std::string>& texts,
                                      const TokenizerTrainOptions& options) {
  const std::vector<std::string>& specials = options.special_tokens;
  const auto base = static_cast<int64_t>(specials.size()) + 256;
  if (options.vocab_size < base)
    throw Error("vocab size " + std::to_string(options.vocab_size) + " is below the " +
                std::to_string(base) + " special and byte tokens")
        .field("vocab_size");
  std::vector<std::string> tokens;  // byte-level strings of ids specials.size() + k
  std::vector<std::string> token_bytes;
  for (int b = 0; b < 256; ++b) {
    const std::string raw(1, static_cast<char>(b));
    tokens.push_back(byte_level_token(raw));
    token_bytes.push_back(raw);
  }
  const Tokenizer pre =
      from_json(nlohmann::json(tokenizer_doc(
                    specials, tokens, {}, options.split_digits_individually, options.bare_words)),
                "<trainer>");

  // Distinct pre-tokens and their counts, in first-seen order (deterministic).
  std::unordered_map<std::string, std::size_t> word_index;
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  const auto first_byte_id = static_cast<int32_t>(specials.size());
  for (const std::string& text : texts) {
    for (std::string& piece : pre.pre_tokenize(text)) {
      auto [it, inserted] = word_index.emplace(std::move(piece), words.size());
      if (inserted) {
        std::vector<int32_t> symbols;
        for (unsigned char b : it->first) symbols.push_back(first_byte_id + b);
        words.push_back(std::move(symbols));
        counts.push_back(0);
      }
      ++counts[it->second];
    }
  }

  std::unordered_map<uint64_t, int64_t, PairHash> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>, PairHash> pair_words;
  for (std::size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w];
    for (std::size_t k = 0; k + 1 < s.size(); ++k) {
      const uint64_t p = key(s[k], s[k + 1]);
      pair_count[p] += counts[w];
      auto& list = pair_words[p];
      if (list.empty() || list.back() != w) list.push_back(static_cast<uint32_t>(w));
    }
  }
  struct Entry {
    int64_t count;
    uint64_t pair;
    // Max-heap: larger count first, then the smaller (left, right) id pair.
    bool operator<(const Entry& o) const {
      return count != o.count ? count < o.count : pair > o.pair;
    }
  };
  std::priority_queue<Entry> heap;
  for (const auto& [p, c] : pair_count) heap.push({c, p});

  std::unordered_map<std::string, int32_t> id_of_bytes;
  for (int b = 0; b < 256; ++b)
    id_of_bytes[token_bytes[static_cast<std::size_t>(b)]] = first_byte_id + b;
  std::vector<std::pair<std::string, std::string>> merges;
  const int64_t target_merges = options.vocab_size - base;
  const int64_t min_count = std::max<int64_t>(1, options.min_frequency);
  std::optional<Progress> progress;
  if (options.show_progress) progress.emplace("tokenizer: merges", target_merges);

  auto add_word_pairs = [&](std::size_t w, int64_t sign, std::vector<uint64_t>* touched) {
    const auto& s = words[w];
    for (std::size_t k = 0; k + 1 < s.size(); ++k) {
      const uint64_t p = key(s[k], s[k + 1]);
      pair_count[p] += sign * counts[w];
      if (touched) touched->push_back(p);
      if (sign > 0) {
        auto& list = pair_words[p];
        if (list.empty() || list.back() != w) list.push_back(static_cast<uint32_t>(w));
      }
    }
  };

  int64_t new_tokens = 0;
  std::vector<uint64_t> touched;
  while (new_tokens < target_merges && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    auto found = pair_count.find(top.pair);
    const int64_t current = found == pair_count.end() ? 0 : found->second;
    if (current != top.count) {  // stale entry
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current < min_count) break;
    const auto left = static_cast<int32_t>(top.pair >> 32);
    const auto right = static_cast<int32_t>(top.pair & 0xFFFFFFFFu);
    const std::string& left_bytes = token_bytes[static_cast<std::size_t>(left - first_byte_id)];
    const std::string& right_bytes = token_bytes[static_cast<std::size_t>(right - first_byte_id)];
    const std::string merged_bytes = left_bytes + right_bytes;
    merges.emplace_back(tokens[static_cast<std::size_t>(left - first_byte_id)],
                        tokens[static_cast<std::size_t>(right - first_byte_id)]);
    // Two different pairs can spell the same token: it keeps its first id (as `tokenizers`).
    int32_t new_id;
    auto existing = id_of_bytes.find(merged_bytes);
    if (existing != id_of_bytes.end()) {
      new_id = existing->second;
    } else {
      new_id = first_byte_id + static_cast<int32_t>(tokens.size());
      tokens.push_back(byte_level_token(merged_bytes));
      token_bytes.push_back(merged_bytes);
      id_of_bytes.emplace(merged_bytes, new_id);
      ++new_tokens;
    }
    touched.clear();
    std::vector<uint32_t> affected = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    for (uint32_t w : affected) {
      auto& s = words[w];
      bool has = false;
      for (std::size_t k = 0; k + 1 < s.size(); ++k)
        has = has || (s[k] == left && s[k + 1] == right);
      if (!has) continue;  // stale membership
      add_word_pairs(w, -1, &touched);
      std::vector<int32_t> merged;
      merged.reserve(s.size());
      for (std::size_t k = 0; k < s.size(); ++k) {
        if (k + 1 < s.size() && s[k] == left && s[k + 1] == right) {
          merged.push_back(new_id);
          ++k;
        } else {
          merged.push_back(s[k]);
        }
      }
      s = std::move(merged);
      add_word_pairs(w, +1, &touched);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t p : touched) {
      auto it = pair_count.find(p);
      if (it == pair_count.end()) continue;
      if (it->second <= 0) {
        pair_count.erase(it);
      } else {
        heap.push({it->second, p});
      }
    }
    if (progress) progress->update(new_tokens);
  }
  if (progress) progress->finish(std::to_string(merges.size()) + " merges");

  return from_json(
      nlohmann::json(tokenizer_doc(specials, tokens, merges, options.split_digits_individually,
                                   options.bare_words)),
      "<trained>");
}

}  // namespace trex::io
