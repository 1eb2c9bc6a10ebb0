// `trex tokenizer train | encode | decode`: byte-level BPE tokenizers in HF tokenizer.json
// format (see docs/tokenizer.md).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trex/cli/commands.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/io/tokenizer.hpp"

namespace trex::cli {
namespace {

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct TrainOptions {
  std::string corpus;
  int64_t vocab_size = 8000;
  int64_t min_frequency = 2;
  std::string out;
  bool split_digits = false;
  bool bare_words = false;
};

struct EncodeOptions {
  std::string tokenizer;
  std::string text;
  std::string input;
  bool jsonl = false;
  bool add_special_tokens = false;
  bool show_tokens = false;
  bool stats = false;
};

struct DecodeOptions {
  std::string tokenizer;
  std::string ids;
  bool skip_special_tokens = false;
};

void run_train(const TrainOptions& o) {
  io::TokenizerTrainOptions options;
  options.vocab_size = o.vocab_size;
  options.min_frequency = o.min_frequency;
  options.split_digits_individually = o.split_digits;
  options.bare_words = o.bare_words;
  const auto start = std::chrono::steady_clock::now();
  const io::Tokenizer tok = io::Tokenizer::train(split_list(o.corpus, ','), options);
  tok.save(o.out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (tok.vocab_size() < o.vocab_size)
    std::cerr << "trex: warning: the corpus has no pair seen at least " << o.min_frequency
              << " times left; the vocabulary stops at " << tok.vocab_size() << " of "
              << o.vocab_size << " tokens\n";
  std::cerr << "trex: tokenizer with " << tok.vocab_size() << " tokens (" << tok.merge_count()
            << " merges) written to " << o.out << " in " << seconds << " s\n";
}

void print_ids(const io::Tokenizer& tok, const std::vector<int32_t>& ids, bool jsonl,
               bool show_tokens) {
  nlohmann::json out;
  out["ids"] = ids;
  if (show_tokens) {
    nlohmann::json tokens = nlohmann::json::array();
    for (int32_t id : ids) tokens.push_back(tok.id_to_token(id));
    out["tokens"] = tokens;
  }
  if (jsonl || show_tokens) {
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (std::size_t k = 0; k < ids.size(); ++k) std::cout << (k ? " " : "") << ids[k];
    std::cout << "\n";
  }
}

void run_encode(const EncodeOptions& o) {
  const io::Tokenizer tok = io::Tokenizer::load(o.tokenizer);
  if (o.input.empty()) {
    print_ids(tok, tok.encode(o.text, o.add_special_tokens), o.jsonl, o.show_tokens);
    return;
  }
  const std::string data = read_file(o.input);
  std::vector<std::string> texts;
  if (o.jsonl) {
    std::istringstream in(data);
    std::string line;
    long line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("invalid JSON: ") + e.what()).file(o.input).line(line_no);
      }
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
        throw Error("expected an object with a string \"text\"")
            .file(o.input)
            .line(line_no)
            .field("text");
      texts.push_back(j["text"].get<std::string>());
    }
  } else {
    texts.push_back(data);
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> all;
  std::size_t bytes = 0, tokens = 0;
  for (const std::string& t : texts) {
    all.push_back(tok.encode(t, o.add_special_tokens));
    bytes += t.size();
    tokens += all.back().size();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& ids : all) print_ids(tok, ids, o.jsonl, o.show_tokens);
  if (o.stats) {
    std::fprintf(stderr, "trex: %zu bytes -> %zu tokens (%.3f bytes/token) in %.3f s: %.2f MB/s\n",
                 bytes, tokens,
                 tokens ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0.0, seconds,
                 seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0);
  }
}

void run_decode(const DecodeOptions& o) {
  const io::Tokenizer tok = io::Tokenizer::load(o.tokenizer);
  std::vector<int32_t> ids;
  for (const std::string& item : split_list(o.ids, ',')) {
    for (const std::string& part : split_list(item, ' ')) {
      try {
        std::size_t used = 0;
        const long v = std::stol(part, &used);
        if (used != part.size()) throw std::invalid_argument(part);
        ids.push_back(static_cast<int32_t>(v));
      } catch (const std::exception&) {
        throw Error("not an integer token id: \"" + part + "\"").field("--ids");
      }
    }
  }
  std::cout << tok.decode(ids, o.skip_special_tokens) << "\n";
}

}  // namespace

void add_tokenizer_commands(CLI::App& app) {
  auto* group = app.add_subcommand(
      "tokenizer", "Byte-level BPE tokenizers (HF tokenizer.json): train, encode, decode");
  group->require_subcommand(1);

  auto train = std::make_shared<TrainOptions>();
  auto* t = group->add_subcommand(
      "train", "Train a byte-level BPE vocabulary with the DeepSeek-V4 special tokens");
  t->add_option("--corpus", train->corpus, "Text file(s), comma-separated")->required();
  t->add_option("--vocab-size", train->vocab_size,
                "Vocabulary size incl. 7 special and 256 byte tokens")
      ->required();
  t->add_option("--out", train->out, "Output tokenizer.json")->required();
  t->add_option("--min-frequency", train->min_frequency, "Never merge a pair seen fewer times")
      ->capture_default_str();
  t->add_flag("--split-digits", train->split_digits,
              "Every digit its own pre-token (default: groups of up to 3 digits, as DeepSeek-V3)");
  t->add_flag("--bare-words", train->bare_words,
              "Words without a leading space (the space is its own token), so 'pale ale' and "
              "'pale_ale' share word tokens");
  t->callback([train] { run_train(*train); });

  auto enc = std::make_shared<EncodeOptions>();
  auto* e = group->add_subcommand("encode", "Print the token ids of a text");
  e->add_option("--tokenizer", enc->tokenizer, "tokenizer.json")->required();
  auto* text_opt = e->add_option("--text", enc->text, "Text to encode");
  auto* input_opt =
      e->add_option("--input", enc->input, "File to encode (whole file, or JSONL with --jsonl)");
  text_opt->excludes(input_opt);
  e->add_flag("--jsonl", enc->jsonl,
              "Input lines are {\"text\": ...}; output lines are {\"ids\": [...]}");
  e->add_flag("--add-special-tokens", enc->add_special_tokens,
              "Apply the file's post-processor template");
  e->add_flag("--show-tokens", enc->show_tokens, "Also print the token strings");
  e->add_flag("--stats", enc->stats, "Print bytes, tokens and encoding speed (MB/s) to stderr");
  e->callback([enc] { run_encode(*enc); });

  auto dec = std::make_shared<DecodeOptions>();
  auto* d = group->add_subcommand("decode", "Print the text of token ids");
  d->add_option("--tokenizer", dec->tokenizer, "tokenizer.json")->required();
  d->add_option("--ids", dec->ids, "Token ids, comma- or space-separated")->required();
  d->add_flag("--skip-special-tokens", dec->skip_special_tokens, "Leave out special tokens");
  d->callback([dec] { run_decode(*dec); });
}

}  // namespace trex::cli
