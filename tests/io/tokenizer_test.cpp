#include "trex/io/tokenizer.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"

namespace trex::io {
namespace {

using json = nlohmann::json;
using test::TempDir;

std::string fixture(const std::string& name) {
  return test::source_dir() + "/tests/fixtures/tokenizer/" + name;
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> rows;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(json::parse(line));
  }
  return rows;
}

std::vector<int32_t> ids_of(const json& row) {
  return row["ids"].get<std::vector<int32_t>>();
}

std::vector<std::string> corpus_lines() {
  const std::string text = read_file(fixture("corpus.txt"));
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

// Same digest as reference/make_tokenizer_fixtures.py: FNV-1a 64 over little-endian int32 ids,
// each list followed by -1.
std::string ids_digest(const std::vector<std::vector<int32_t>>& lists) {
  uint64_t h = 0xCBF29CE484222325ull;
  auto feed = [&](int32_t v) {
    const auto u = static_cast<uint32_t>(v);
    for (int k = 0; k < 4; ++k) {
      h ^= (u >> (8 * k)) & 0xFFu;
      h *= 0x100000001B3ull;
    }
  };
  for (const auto& ids : lists) {
    for (int32_t v : ids) feed(v);
    feed(-1);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

const Tokenizer& dsv3() {
  static const Tokenizer tok = Tokenizer::load(fixture("dsv3_style.tokenizer.json"));
  return tok;
}

// ---------------------------------------------------------------------------------------------
// (a) A DeepSeek-V3-style tokenizer.json trained by `tokenizers`: ids equal Python's.

TEST(TokenizerParity, Dsv3StyleTestStringsMatchPython) {
  const auto rows = read_jsonl(fixture("dsv3_style.expected.jsonl"));
  ASSERT_EQ(rows.size(), 52u);
  for (const json& row : rows) {
    const std::string text = row["text"];
    const auto ids = dsv3().encode(text);
    EXPECT_EQ(ids, ids_of(row)) << text;
    EXPECT_EQ(dsv3().decode(ids, /*skip_special_tokens=*/true), row["decoded"].get<std::string>())
        << text;
    EXPECT_EQ(dsv3().decode(ids, false), row["decoded_no_skip"].get<std::string>()) << text;
    EXPECT_EQ(dsv3().decode(ids, false), text);  // round trip
  }
}

TEST(TokenizerParity, Dsv3StyleRandomUnicodeStringsMatchPython) {
  const auto rows = read_jsonl(fixture("dsv3_style.fuzz.jsonl"));
  ASSERT_EQ(rows.size(), 400u);
  int mismatches = 0;
  for (const json& row : rows) {
    const std::string text = row["text"];
    const auto ids = dsv3().encode(text);
    if (ids != ids_of(row)) ++mismatches;
    EXPECT_EQ(ids, ids_of(row)) << text;
    EXPECT_EQ(dsv3().decode(ids), text);
  }
  EXPECT_EQ(mismatches, 0);
}

// The whole 300 KB training corpus line by line (digest of Python's ids), and the speed.
TEST(TokenizerParity, Dsv3StyleCorpusDigestMatchesPythonAndSpeed) {
  const json expected = json::parse(read_file(fixture("dsv3_style.corpus_digest.json")));
  const auto lines = corpus_lines();
  ASSERT_EQ(static_cast<int64_t>(lines.size()), expected["lines"].get<int64_t>());
  const Tokenizer tok = Tokenizer::load(fixture("dsv3_style.tokenizer.json"));  // cold cache
  std::size_t bytes = 0, tokens = 0;
  std::vector<std::vector<int32_t>> all;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& line : lines) all.push_back(tok.encode(line));
  const auto t1 = std::chrono::steady_clock::now();
  for (const auto& line : lines) tok.encode(line);
  const auto t2 = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < lines.size(); ++k) bytes += lines[k].size(), tokens += all[k].size();
  EXPECT_EQ(static_cast<int64_t>(tokens), expected["tokens"].get<int64_t>());
  EXPECT_EQ(ids_digest(all), expected["fnv1a64"].get<std::string>());
  const double cold = std::chrono::duration<double>(t1 - t0).count();
  const double warm = std::chrono::duration<double>(t2 - t1).count();
  std::printf(
      "[ speed    ] encode %zu bytes -> %zu tokens: %.2f MB/s (cold cache), %.2f MB/s (warm "
      "cache)\n",
      bytes, tokens, static_cast<double>(bytes) / 1e6 / cold,
      static_cast<double>(bytes) / 1e6 / warm);
  std::string joined;
  for (const auto& line : lines) joined += line;
  std::vector<int32_t> flat;
  for (const auto& ids : all) flat.insert(flat.end(), ids.begin(), ids.end());
  EXPECT_EQ(tok.decode(flat), joined);
}

// 4000 random extra merges (some spelling tokens that another pair already makes) stress the merge
// order; corpus lines + the random strings, as a digest of Python's ids.
TEST(TokenizerParity, RandomExtraMergesMatchPython) {
  const json expected = json::parse(read_file(fixture("random_merges.digest.json")));
  const Tokenizer tok = Tokenizer::load(fixture("random_merges.tokenizer.json"));
  std::vector<std::vector<int32_t>> all;
  for (const auto& line : corpus_lines()) all.push_back(tok.encode(line));
  for (const json& row : read_jsonl(fixture("dsv3_style.fuzz.jsonl")))
    all.push_back(tok.encode(row["text"].get<std::string>()));
  ASSERT_EQ(static_cast<int64_t>(all.size()),
            expected["lines"].get<int64_t>() + expected["fuzz"].get<int64_t>());
  std::size_t tokens = 0;
  for (const auto& ids : all) tokens += ids.size();
  EXPECT_EQ(static_cast<int64_t>(tokens), expected["tokens"].get<int64_t>());
  EXPECT_EQ(ids_digest(all), expected["fnv1a64"].get<std::string>());
}

// encode() is const and shares the pre-token cache: concurrent callers get the serial answer.
TEST(TokenizerParity, ConcurrentEncodingMatchesSerial) {
  const Tokenizer tok = Tokenizer::load(fixture("dsv3_style.tokenizer.json"));
  const auto rows = read_jsonl(fixture("dsv3_style.fuzz.jsonl"));
  std::vector<std::vector<std::vector<int32_t>>> results(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t k = 0; k < rows.size(); ++k)
        results[t].push_back(
            tok.encode(rows[(k + t * 97) % rows.size()]["text"].get<std::string>()));
    });
  }
  for (auto& th : threads) th.join();
  for (std::size_t t = 0; t < results.size(); ++t) {
    for (std::size_t k = 0; k < rows.size(); ++k)
      EXPECT_EQ(results[t][k], ids_of(rows[(k + t * 97) % rows.size()]));
  }
}

TEST(TokenizerParity, MergesAsStringsLoadLikeMergesAsLists) {
  json doc = json::parse(read_file(fixture("dsv3_style.tokenizer.json")));
  ASSERT_TRUE(doc["model"]["merges"][0].is_array());
  json strings = json::array();
  for (const json& m : doc["model"]["merges"])
    strings.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  doc["model"]["merges"] = strings;
  const Tokenizer from_strings = Tokenizer::from_json(doc);
  EXPECT_EQ(from_strings.merge_count(), dsv3().merge_count());
  for (const json& row : read_jsonl(fixture("dsv3_style.expected.jsonl")))
    EXPECT_EQ(from_strings.encode(row["text"].get<std::string>()), ids_of(row));
}

TEST(TokenizerParity, PreTokenizerSplitsLikeDeepSeekV3) {
  // Digits in groups of up to 3, CJK/kana runs apart, punctuation + letters, whitespace runs.
  EXPECT_EQ(dsv3().pre_tokenize("x=1234567"),
            (std::vector<std::string>{"x", "=", "123", "456", "7"}));
  EXPECT_EQ(dsv3().pre_tokenize("你好world"), (std::vector<std::string>{"你好", "world"}));
  EXPECT_EQ(dsv3().pre_tokenize("a.bc  d\n\n"),
            (std::vector<std::string>{"a", ".bc", " ", " d", "\n\n"}));
  EXPECT_EQ(dsv3().pre_tokenize("don't"), (std::vector<std::string>{"don", "'t"}));
  EXPECT_EQ(dsv3().pre_tokenize("a<think>b"),
            (std::vector<std::string>{"a", "b"}));  // added tokens cut out
}

// ---------------------------------------------------------------------------------------------
// (c) Special tokens: the spec §5 worked example with the real V4 ids.

TEST(TokenizerSpecial, WorkedExampleGivesV4Ids) {
  const Tokenizer tok = Tokenizer::load(fixture("v4_ids.tokenizer.json"));  // merges as "a b"
  const std::string text =
      "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>";
  const std::vector<int32_t> expected = {128803, 30594, 128804, 128821, 36101, 128822, 7624, 1};
  EXPECT_EQ(tok.encode(text), expected);
  EXPECT_EQ(tok.decode(expected), text);
  EXPECT_EQ(tok.decode(expected, /*skip_special_tokens=*/true), "你好推理答案");
  const SpecialTokenIds& s = tok.special_ids();
  EXPECT_EQ(s.bos, 0);
  EXPECT_EQ(s.eos, 1);
  EXPECT_EQ(s.pad, 2);
  EXPECT_EQ(s.user, 128803);
  EXPECT_EQ(s.assistant, 128804);
  EXPECT_EQ(s.think, 128821);
  EXPECT_EQ(s.end_think, 128822);
  EXPECT_EQ(tok.vocab_size(), 128823);
  EXPECT_TRUE(tok.is_special(128803));
  EXPECT_FALSE(tok.is_special(30594));
  EXPECT_EQ(tok.token_to_id("<think>"), 128821);
  EXPECT_EQ(tok.id_to_token(1), "<｜end▁of▁sentence｜>");
  EXPECT_THROW(tok.id_to_token(5), Error);  // a hole in the vocabulary
}

TEST(TokenizerSpecial, AddedTokensMatchLongestFirstAndTakeHfIds) {
  json doc = json::parse(read_file(fixture("dsv3_style.tokenizer.json")));
  const auto model_size = static_cast<int32_t>(doc["model"]["vocab"].size());
  auto added = [](const std::string& content, bool special) {
    return json{{"id", 999999},    {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  doc["added_tokens"].push_back(added("<a>", true));
  doc["added_tokens"].push_back(added("<a><b>", false));
  const Tokenizer tok = Tokenizer::from_json(doc);
  // `tokenizers` ignores the file's id of a token outside the model vocabulary.
  EXPECT_EQ(tok.token_to_id("<a>"), model_size);
  EXPECT_EQ(tok.token_to_id("<a><b>"), model_size + 1);
  const auto ids = tok.encode("x<a><b><a>y");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[1], model_size + 1);
  EXPECT_EQ(ids[2], model_size);
  EXPECT_EQ(tok.decode(ids, true), "x<a><b>y");  // only special tokens are skipped
  EXPECT_EQ(dsv3().special_ids().bos, 0);
  EXPECT_EQ(dsv3().special_ids().eos, 1);
  EXPECT_EQ(dsv3().special_ids().end_think, 6);
  EXPECT_EQ(dsv3().encode("<think><think></think>"), (std::vector<int32_t>{5, 5, 6}));
}

TEST(TokenizerSpecial, TemplatePostProcessorAddsBos) {
  json doc = json::parse(read_file(fixture("dsv3_style.tokenizer.json")));
  doc["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       json::array({{{"SpecialToken", {{"id", "<｜begin▁of▁sentence｜>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens",
       {{"<｜begin▁of▁sentence｜>",
         {{"id", "<｜begin▁of▁sentence｜>"}, {"ids", {0}}, {"tokens", {"x"}}}}}}};
  const Tokenizer tok = Tokenizer::from_json(doc);
  const auto plain = tok.encode("Hello");
  auto with = tok.encode("Hello", true);
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with[0], 0);
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), plain);
}

// ---------------------------------------------------------------------------------------------
// (b) Training: a tokenizer trained by T-Rex, loaded by Python `tokenizers`, encodes the same.

TokenizerTrainOptions fixture_train_options() {
  TokenizerTrainOptions o;
  o.vocab_size = 1000;  // what reference/make_tokenizer_fixtures.py trex used
  o.show_progress = false;
  return o;
}

TEST(TokenizerTrain, TrexTrainedTokenizerEncodesLikePython) {
  const Tokenizer tok = Tokenizer::load(fixture("trex_trained.tokenizer.json"));
  for (const json& row : read_jsonl(fixture("trex_trained.expected.jsonl"))) {
    const std::string text = row["text"];
    EXPECT_EQ(tok.encode(text), ids_of(row)) << text;
    EXPECT_EQ(tok.decode(ids_of(row), true), row["decoded"].get<std::string>());
  }
}

TEST(TokenizerTrain, RetrainingReproducesTheFixtureExactly) {
  const Tokenizer tok = Tokenizer::train({fixture("corpus.txt")}, fixture_train_options());
  EXPECT_EQ(tok.vocab_size(), 1000);
  const json committed = json::parse(read_file(fixture("trex_trained.tokenizer.json")));
  EXPECT_EQ(json(tok.to_json()), committed);
  const SpecialTokenIds& s = tok.special_ids();
  EXPECT_EQ(s.bos, 0);
  EXPECT_EQ(s.eos, 1);
  EXPECT_EQ(s.pad, 2);
  EXPECT_EQ(s.user, 3);
  EXPECT_EQ(s.assistant, 4);
  EXPECT_EQ(s.think, 5);
  EXPECT_EQ(s.end_think, 6);
  // Frequent words of the corpus became single tokens; numbers stay in groups of <= 3 digits.
  EXPECT_EQ(tok.encode(" profit").size(), 1u);
  EXPECT_EQ(tok.pre_tokenize("12345"), (std::vector<std::string>{"123", "45"}));
}

TEST(TokenizerTrain, MostFrequentPairFirstThenSmallestIds) {
  TokenizerTrainOptions o;
  o.vocab_size = 7 + 256 + 3;
  o.min_frequency = 1;
  o.show_progress = false;
  // Pre-tokens: "ab" x1, " ab" x2, " cd" x3, " xy" x1. Pair counts: (a,b) 3, (Ġ,c) 3, (c,d) 3,
  // (Ġ,a) 2, ... Ties go to the smallest left id: "Ġ" (byte 0x20, id 7 + 32) before "a" (7 + 97).
  const Tokenizer tok = Tokenizer::train_from_texts({"ab ab ab cd cd cd xy"}, o);
  const json doc = json(tok.to_json());
  const json& merges = doc["model"]["merges"];
  ASSERT_EQ(merges.size(), 3u);
  EXPECT_EQ(merges[0], json::array({"Ġ", "c"}));
  EXPECT_EQ(merges[1], json::array({"a", "b"}));  // 3, tied with (Ġc, d); "a" has the smaller id
  EXPECT_EQ(merges[2], json::array({"Ġc", "d"}));
  EXPECT_EQ(doc["model"]["vocab"]["Ġc"], 263);
  EXPECT_EQ(doc["model"]["vocab"]["ab"], 264);
  EXPECT_EQ(doc["model"]["vocab"]["Ġcd"], 265);
  EXPECT_EQ(tok.encode(" cd ab"), (std::vector<int32_t>{265, 39, 264}));
}

// A 600-token vocabulary on the fixture corpus, with one pre-tokenizer switch set.
Tokenizer train_small(bool TokenizerTrainOptions::*pre_tokenizer_switch) {
  TokenizerTrainOptions o;
  o.vocab_size = 600;
  o.*pre_tokenizer_switch = true;
  o.show_progress = false;
  return Tokenizer::train({fixture("corpus.txt")}, o);
}

TEST(TokenizerTrain, SplitDigitsIndividually) {
  const Tokenizer tok = train_small(&TokenizerTrainOptions::split_digits_individually);
  EXPECT_EQ(tok.pre_tokenize("x=2024"), (std::vector<std::string>{"x", "=", "2", "0", "2", "4"}));
  const auto ids = tok.encode("param avail := 12345 678;");
  int digit_tokens = 0;
  for (int32_t id : ids) {
    const std::string t = tok.id_to_token(id);
    if (!t.empty() && t[0] >= '0' && t[0] <= '9') {
      EXPECT_EQ(t.size(), 1u) << t;
      ++digit_tokens;
    }
  }
  EXPECT_EQ(digit_tokens, 8);
}

TEST(TokenizerTrain, BareWordsShareWordTokensAcrossSeparators) {
  const Tokenizer tok = train_small(&TokenizerTrainOptions::bare_words);
  // The space is its own pre-token; punctuation no longer glues to the word after it.
  EXPECT_EQ(
      tok.pre_tokenize("face mask:=face_mask\nWarren"),
      (std::vector<std::string>{"face", " ", "mask", ":=", "face", "_", "mask", "\n", "Warren"}));
  // A name in prose and in a MathProg data line: the words have the same ids.
  auto word_ids = [&](const std::string& text) {
    std::vector<int32_t> out;
    for (int32_t id : tok.encode(text)) {
      const std::string t = tok.id_to_token(id);
      if (t != "Ġ" && t != "_" && t != "Ċ") out.push_back(id);
    }
    return out;
  };
  EXPECT_EQ(word_ids("the pale ale"), word_ids("the_pale_ale"));
  EXPECT_EQ(word_ids(" Warren"), word_ids("\nWarren"));
  const std::string text = "set P := pale_ale saison;\nparam c := Warren 18.92 5;";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  // The default (DeepSeek-V3) split keeps the space on the word: different ids.
  const Tokenizer v3 = Tokenizer::train({fixture("corpus.txt")}, fixture_train_options());
  EXPECT_EQ(v3.pre_tokenize("pale ale_ale"), (std::vector<std::string>{"pale", " ale", "_ale"}));
}

TEST(TokenizerTrain, SaveAndLoadRoundTrip) {
  TempDir dir;
  const Tokenizer tok = Tokenizer::train({fixture("corpus.txt")}, fixture_train_options());
  tok.save(dir.file("sub/tokenizer.json"));
  const Tokenizer back = Tokenizer::load(dir.file("sub/tokenizer.json"));
  EXPECT_EQ(json(back.to_json()), json(tok.to_json()));
  for (const json& row : read_jsonl(fixture("test_strings.jsonl"))) {
    const std::string text = row["text"];
    EXPECT_EQ(back.encode(text), tok.encode(text));
    EXPECT_EQ(back.decode(back.encode(text)), text);
  }
}

TEST(TokenizerTrain, RejectsTooSmallVocabulary) {
  TokenizerTrainOptions o;
  o.vocab_size = 100;
  o.show_progress = false;
  EXPECT_THROW(Tokenizer::train_from_texts({"abc"}, o), Error);
}

// ---------------------------------------------------------------------------------------------
// Regex engine, Unicode helpers, errors

std::vector<std::string> matches(const std::string& pattern, const std::string& text) {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  unicode::decode_utf8(text, cps, offsets);
  std::vector<std::string> out;
  for (const auto& [b, e] : Regex(pattern).find_all(cps.data(), static_cast<uint32_t>(cps.size())))
    out.push_back(text.substr(offsets[b], offsets[e] - offsets[b]));
  return out;
}

TEST(TokenizerRegex, LeftmostFirstBacktrackingSemantics) {
  using V = std::vector<std::string>;
  EXPECT_EQ(matches("\\s+(?!\\S)|\\s+", "a   b  "), (V{"  ", " ", "  "}));
  EXPECT_EQ(matches("\\p{N}{1,3}", "1234567 89"), (V{"123", "456", "7", "89"}));
  EXPECT_EQ(matches("(?i:'s|'ll)|\\p{L}+", "IT'S we'LL"), (V{"IT", "'S", "we", "'LL"}));
  EXPECT_EQ(matches("a|ab", "ab"), (V{"a"}));  // first alternative wins, not the longest
  EXPECT_EQ(matches("a+?b", "aaab"), (V{"aaab"}));
  EXPECT_EQ(matches("[^\\s\\p{L}]+", "ab, 12!c"), (V{",", "12!"}));
  EXPECT_EQ(matches("[\\S]+", "ab c"), (V{"ab", "c"}));
  EXPECT_EQ(matches("\\s+$", "a  \nb  "), (V{"  ", "  "}));
  EXPECT_EQ(matches("x(?=y)", "xyxz"), (V{"x"}));
  EXPECT_EQ(matches("[一-龥]+", "ab中文cd"), (V{"中文"}));
  EXPECT_EQ(matches("\\x41\\u00e9\\x{1F600}", "Aé😀"), (V{"Aé😀"}));
  EXPECT_THROW(Regex("(a"), Error);
  EXPECT_THROW(Regex("\\p{Han}"), Error);
  EXPECT_THROW(Regex("(a*)*"), Error);
  EXPECT_THROW(Regex("a++"), Error);
}

TEST(TokenizerUnicode, CategoriesAndLossyUtf8) {
  using unicode::Category;
  EXPECT_EQ(unicode::category('A'), Category::Lu);
  EXPECT_EQ(unicode::category(U'中'), Category::Lo);
  EXPECT_EQ(unicode::category(U'٣'), Category::Nd);
  EXPECT_EQ(unicode::category(U'²'), Category::No);
  EXPECT_EQ(unicode::category(U'😀'), Category::So);
  EXPECT_EQ(unicode::category(0x0301), Category::Mn);
  EXPECT_EQ(unicode::category(0x10FFFF), Category::Cn);
  EXPECT_TRUE(unicode::is_white_space(0x3000));
  EXPECT_FALSE(unicode::is_white_space(0x200B));
  EXPECT_EQ(unicode::utf8_lossy("a\xC3"), "a\xEF\xBF\xBD");
  EXPECT_EQ(unicode::utf8_lossy("\xF0\x9F\x98!"), "\xEF\xBF\xBD!");        // one maximal subpart
  EXPECT_EQ(unicode::utf8_lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // E0 needs A0..BF
  EXPECT_EQ(unicode::utf8_lossy("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

TEST(TokenizerBytes, InvalidUtf8AndSplitCharactersDecodeLossily) {
  const auto ids = dsv3().encode(
      "\xFF\xFE"
      "abc");
  EXPECT_EQ(dsv3().decode(ids),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "abc");
  const auto cjk = dsv3().encode("中");  // 3 bytes; decoding a prefix gives U+FFFD
  ASSERT_GE(cjk.size(), 1u);
  EXPECT_EQ(dsv3().decode(std::vector<int32_t>{cjk[0]}), cjk.size() > 1 ? "\xEF\xBF\xBD" : "中");
  EXPECT_EQ(dsv3().decode(std::vector<int32_t>{-1, 5000000}), "");  // unknown ids are skipped
}

// Byte-level BPE is lossless on bytes: decode(encode(x)) is x read as lossy UTF-8, for any bytes.
TEST(TokenizerBytes, RandomBytesRoundTripLossily) {
  Rng rng(20261129, {6});
  const char* pieces[] = {"a",          " ",        "\n",   "1",    "中", "é", "<think>",
                          "<｜User｜>", "\xF0\x9F", "\x80", "\xFF", "'s", "!!"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int64_t n = rng.uniform_int(0, 30);
    for (int64_t k = 0; k < n; ++k) {
      if (rng.uniform() < 0.5) {
        text += static_cast<char>(rng.uniform_int(0, 255));
      } else {
        text += pieces[rng.uniform_int(0, 12)];
      }
    }
    const auto ids = dsv3().encode(text);
    EXPECT_EQ(dsv3().decode(ids), unicode::utf8_lossy(text));
  }
}

void expect_load_error(json doc, const std::string& field_part) {
  TempDir dir;
  write_file_atomic(dir.file("t.json"), doc.dump());
  try {
    Tokenizer::load(dir.file("t.json"));
    ADD_FAILURE() << "no error for " << field_part;
  } catch (const Error& e) {
    EXPECT_EQ(e.file_name(), dir.file("t.json"));
    EXPECT_NE(e.field_name().find(field_part), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, BadFilesNameTheField) {
  const json good = json::parse(read_file(fixture("v4_ids.tokenizer.json")));
  json d = good;
  d["model"]["merges"].push_back("zz qq");
  expect_load_error(d, "model.merges[");
  d = good;
  d["model"].erase("vocab");
  expect_load_error(d, "model.vocab");
  d = good;
  d["model"]["type"] = "WordPiece";
  expect_load_error(d, "model.type");
  d = good;
  d["normalizer"] = {{"type", "NFC"}};
  expect_load_error(d, "normalizer");
  d = good;
  d["added_tokens"][0]["lstrip"] = true;
  expect_load_error(d, "added_tokens[0].lstrip");
  d = good;
  d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{N}";
  expect_load_error(d, "pre_tokenizer.pretokenizers[0].pattern");
  d = good;
  d["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_load_error(d, "pre_tokenizer.type");
  TempDir dir;
  write_file_atomic(dir.file("bad.json"), "{not json");
  EXPECT_THROW(Tokenizer::load(dir.file("bad.json")), Error);
  EXPECT_THROW(Tokenizer::load(dir.file("missing.json")), Error);
}

TEST(TokenizerCli, EncodeDecodeAndTrain) {
  TempDir dir;
  const std::string bin = test::trex_binary();
  const std::string tok = dir.file("tok.json");
  const std::string train = bin + " tokenizer train --corpus " + fixture("corpus.txt") +
                            " --vocab-size 1000 --out " + tok + " 2>/dev/null";
  ASSERT_EQ(std::system(train.c_str()), 0);
  EXPECT_EQ(json::parse(read_file(tok)),
            json::parse(read_file(fixture("trex_trained.tokenizer.json"))));
  const std::string enc = bin + " tokenizer encode --tokenizer " +
                          fixture("v4_ids.tokenizer.json") +
                          " --text '<｜User｜>你好<｜Assistant｜>' > " + dir.file("ids.txt");
  ASSERT_EQ(std::system(enc.c_str()), 0);
  EXPECT_EQ(read_file(dir.file("ids.txt")), "128803 30594 128804\n");
  const std::string dec = bin + " tokenizer decode --tokenizer " +
                          fixture("v4_ids.tokenizer.json") +
                          " --ids 128803,30594 --skip-special-tokens > " + dir.file("text.txt");
  ASSERT_EQ(std::system(dec.c_str()), 0);
  EXPECT_EQ(read_file(dir.file("text.txt")), "你好\n");
  const std::string bad =
      bin + " tokenizer decode --tokenizer " + dir.file("nope.json") + " --ids 1 2>/dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
}

}  // namespace
}  // namespace trex::io
