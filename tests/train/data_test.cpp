// CPT / SFT loader checks: packing layout, masks, positions, document ids,
// determinism by seed, bitwise resume from a JSON-saved state, and the spec §5
// chat encoding on a tokenizer trained here.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/train/data/cpt.hpp"
#include "trex/train/data/sft.hpp"

namespace {

using trex::train::CptLoader;
using trex::train::CptLoaderOptions;
using trex::train::LoaderState;
using trex::train::PackedBatch;
using trex::train::SftLoader;
using trex::train::SftLoaderOptions;
using Docs = std::vector<std::vector<int32_t>>;
constexpr int64_t X = -100;

bool same_batch(const PackedBatch& a, const PackedBatch& b) {
  return a.batch.B == b.batch.B && a.batch.S == b.batch.S &&
         a.batch.input_ids == b.batch.input_ids && a.batch.labels == b.batch.labels &&
         a.position_ids == b.position_ids && a.document_ids == b.document_ids;
}

// Documents 10.., 20.., 30.., ... so each token says which document it is from.
Docs numbered_documents(int count, int base_length) {
  Docs docs;
  for (int d = 0; d < count; ++d) {
    std::vector<int32_t> doc;
    for (int k = 0; k < base_length + d % 5; ++k) doc.push_back(1000 * (d + 1) + k);
    docs.push_back(doc);
  }
  return docs;
}

TEST(TrainCptLoader, PacksDocumentsWithRestartsAndNoCrossDocumentTargets) {
  const Docs docs = {{11, 12, 13}, {21, 22, 23, 24, 25}, {31, 32}};
  CptLoaderOptions o;
  o.seq_len = 4;
  o.batch_size = 3;
  o.shuffle = false;
  CptLoader loader(docs, /*pad_id=*/7, o);
  EXPECT_EQ(loader.sequences_in_epoch(), 3);
  EXPECT_EQ(loader.token_count(), 10);
  const PackedBatch b = loader.next_batch();
  EXPECT_EQ(b.batch.B, 3);
  EXPECT_EQ(b.batch.S, 4);
  EXPECT_EQ(b.batch.input_ids,
            (std::vector<int64_t>{11, 12, 13, 21, 22, 23, 24, 25, 31, 32, 7, 7}));
  EXPECT_EQ(b.batch.labels, (std::vector<int64_t>{X, 12, 13, X, X, 23, 24, 25, X, 32, X, X}));
  EXPECT_EQ(b.position_ids, (std::vector<int64_t>{0, 1, 2, 0, 0, 1, 2, 3, 0, 1, 0, 1}));
  EXPECT_EQ(b.document_ids, (std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(loader.state().epoch, 0);
  EXPECT_EQ(loader.state().cursor, 3);
  // The next batch starts epoch 1 (same order without shuffling).
  const PackedBatch again = loader.next_batch();
  EXPECT_TRUE(same_batch(b, again));
  EXPECT_EQ(loader.state().epoch, 1);
}

TEST(TrainCptLoader, EveryEpochIsAPermutationAndSeedsDecideIt) {
  const Docs docs = numbered_documents(40, 6);
  CptLoaderOptions o;
  o.seq_len = 16;
  o.batch_size = 2;
  o.seed = 5;
  CptLoader a(docs, 0, o), b(docs, 0, o);
  o.seed = 6;
  CptLoader c(docs, 0, o);
  const int64_t per_epoch = a.sequences_in_epoch();
  ASSERT_EQ(per_epoch % 2, 0) << "test assumes whole batches per epoch";
  std::map<int64_t, int> seen;
  bool differs_from_other_seed = false;
  std::vector<int64_t> first_epoch_order;
  for (int64_t i = 0; i < per_epoch / 2; ++i) {
    const PackedBatch x = a.next_batch(), y = b.next_batch(), z = c.next_batch();
    EXPECT_TRUE(same_batch(x, y));
    differs_from_other_seed |= x.batch.input_ids != z.batch.input_ids;
    for (size_t t = 0; t < x.batch.input_ids.size(); ++t) {
      if (x.batch.input_ids[t] == 0) continue;  // padding
      ++seen[x.batch.input_ids[t]];
      // Labels never cross a document: a label equals its token or is masked, and
      // a masked non-padding label is exactly a segment start.
      EXPECT_TRUE(x.batch.labels[t] == x.batch.input_ids[t] || x.batch.labels[t] == X);
      EXPECT_EQ(x.batch.labels[t] == X, x.position_ids[t] == 0);
      if (x.position_ids[t] > 0) {
        EXPECT_EQ(x.batch.input_ids[t] / 1000, x.batch.input_ids[t - 1] / 1000);
        EXPECT_EQ(x.document_ids[t], x.document_ids[t - 1]);
      }
      if (x.position_ids[t] == 0 && t % 16 != 0) {
        EXPECT_EQ(x.document_ids[t], x.document_ids[t - 1] + 1);
      }
    }
    if (i == 0) first_epoch_order = x.batch.input_ids;
  }
  EXPECT_TRUE(differs_from_other_seed);
  int64_t tokens = 0;
  for (const auto& d : docs) tokens += static_cast<int64_t>(d.size());
  EXPECT_EQ(static_cast<int64_t>(seen.size()), tokens);
  for (const auto& [token, count] : seen) EXPECT_EQ(count, 1) << token;
  EXPECT_EQ(a.state().epoch, 0);
  const PackedBatch next_epoch = a.next_batch();
  EXPECT_EQ(a.state().epoch, 1);
  EXPECT_NE(next_epoch.batch.input_ids, first_epoch_order);  // a new order each epoch
}

TEST(TrainCptLoader, ResumesBitwiseFromSavedJsonState) {
  const Docs docs = numbered_documents(25, 5);
  CptLoaderOptions o;
  o.seq_len = 12;
  o.batch_size = 3;
  o.seed = 42;
  CptLoader reference(docs, 0, o);
  const int64_t per_epoch = reference.sequences_in_epoch();
  for (int k : {0, 1, 4, 7}) {
    CptLoader first(docs, 0, o);
    for (int i = 0; i < k; ++i) first.next_batch();
    const std::string saved = first.state().to_json().dump();
    CptLoader resumed(docs, 0, o);
    resumed.restore(LoaderState::from_json(nlohmann::json::parse(saved), "state.json"));
    EXPECT_EQ(resumed.state(), first.state());
    // Run past at least two epoch boundaries.
    for (int64_t i = 0; i < 2 * per_epoch / 3 + 3; ++i)
      ASSERT_TRUE(same_batch(first.next_batch(), resumed.next_batch())) << "k=" << k << " i=" << i;
  }
  // The batch size may change on resume: the sequence stream is the same.
  {
    CptLoader three(docs, 0, o);
    three.next_batch();
    CptLoaderOptions single = o;
    single.batch_size = 1;
    CptLoader one(docs, 0, single);
    one.restore(three.state());
    const PackedBatch big = three.next_batch();
    for (int64_t row = 0; row < 3; ++row) {
      const PackedBatch small = one.next_batch();
      const auto first = big.batch.input_ids.begin() + row * o.seq_len;
      EXPECT_TRUE(std::equal(small.batch.input_ids.begin(), small.batch.input_ids.end(), first));
    }
  }
  CptLoader other_seed(docs, 0, [&] {
    CptLoaderOptions p = o;
    p.seed = 43;
    return p;
  }());
  EXPECT_THROW(other_seed.restore(reference.state()), trex::Error);
  CptLoader other_data(numbered_documents(24, 5), 0, o);
  EXPECT_THROW(other_data.restore(reference.state()), trex::Error);
  LoaderState far = reference.state();
  far.cursor = 1000;
  EXPECT_THROW(reference.restore(far), trex::Error);
  EXPECT_THROW(LoaderState::from_json(nlohmann::json{{"seed", "1"}}, "s.json"), trex::Error);
  EXPECT_THROW(
      LoaderState::from_json(
          nlohmann::json{{"seed", "x"}, {"epoch", 0}, {"cursor", 0}, {"data_fingerprint", "1"}},
          "s.json"),
      trex::Error);
}

trex::io::Tokenizer small_tokenizer() {
  trex::io::TokenizerTrainOptions o;
  o.vocab_size = 320;
  o.show_progress = false;
  return trex::io::Tokenizer::train_from_texts(
      {"minimize the cost of shipping goods from plants to markets",
       "the answer is x = 3 and y = 4", "You are a helpful assistant.", "solve the model"},
      o);
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
}

TEST(TrainCptLoader, TokenisesJsonlWithBosAndEos) {
  const trex::io::Tokenizer tok = small_tokenizer();
  const auto& sp = tok.special_ids();
  trex::test::TempDir dir;
  write_lines(dir.file("docs.jsonl"),
              {R"({"text": "minimize the cost"})", "", R"({"text": "the answer is 3"})"});
  const Docs docs = trex::train::tokenize_text_jsonl(dir.file("docs.jsonl"), tok);
  ASSERT_EQ(docs.size(), 2u);
  for (const auto& d : docs) {
    EXPECT_EQ(d.front(), sp.bos);
    EXPECT_EQ(d.back(), sp.eos);
  }
  EXPECT_EQ(tok.decode(std::vector<int32_t>(docs[0].begin() + 1, docs[0].end() - 1)),
            "minimize the cost");
  CptLoaderOptions o;
  o.seq_len = 8;
  CptLoader loader = CptLoader::from_jsonl(dir.file("docs.jsonl"), tok, o);
  EXPECT_EQ(loader.document_count(), 2);

  write_lines(dir.file("bad.jsonl"), {R"({"text": "ok"})", R"({"body": "no text"})"});
  try {
    trex::train::tokenize_text_jsonl(dir.file("bad.jsonl"), tok);
    FAIL() << "expected an error";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.line_number(), 2);
    EXPECT_EQ(e.field_name(), "text");
  }
  // The loader reads leniently unless strict: the bad document is skipped and counted.
  CptLoader lenient = CptLoader::from_jsonl(dir.file("bad.jsonl"), tok, o);
  EXPECT_EQ(lenient.document_count(), 1);
  EXPECT_EQ(lenient.input().skipped, 1);
  EXPECT_THROW(CptLoader::from_jsonl(dir.file("bad.jsonl"), tok, o, /*strict=*/true), trex::Error);
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(TrainSftLoader, EncodesNonThinkingChatAndMasksAllButTheAnswer) {
  const trex::io::Tokenizer tok = small_tokenizer();
  const auto& sp = tok.special_ids();
  const nlohmann::json messages = nlohmann::json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "solve the model"},
    {"role": "assistant", "content": "the answer is x = 3"}])");
  const trex::io::EncodedChat chat = trex::io::encode_chat(tok, messages);
  const std::vector<int32_t> system = tok.encode("You are a helpful assistant.");
  const std::vector<int32_t> user = tok.encode("solve the model");
  const std::vector<int32_t> answer = tok.encode("the answer is x = 3");
  const std::vector<int32_t> expected =
      concat({{sp.bos}, system, {sp.user}, user, {sp.assistant, sp.end_think}, answer, {sp.eos}});
  EXPECT_EQ(chat.tokens, expected);
  // Same ids as tokenising the rendered string (special tokens split first).
  EXPECT_EQ(chat.tokens,
            tok.encode("<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>solve the "
                       "model<｜Assistant｜></think>the answer is x = 3<｜end▁of▁sentence｜>"));
  const size_t first_trained = 1 + system.size() + 1 + user.size() + 2;
  ASSERT_EQ(chat.labels.size(), expected.size());
  for (size_t t = 0; t < expected.size(); ++t) {
    if (t < first_trained) {
      EXPECT_EQ(chat.labels[t], X) << t;
    } else {
      EXPECT_EQ(chat.labels[t], expected[t]) << t;
    }
  }
  EXPECT_EQ(chat.tokens[first_trained - 1], sp.end_think);
  EXPECT_EQ(chat.labels.back(), sp.eos);

  // Like tokenising the rendered prompt with HF tokenizers: special-token text inside content
  // becomes the special token (DeepSeek's encoding renders a string, then tokenises it).
  const auto injected = trex::io::encode_chat(
      tok, nlohmann::json::parse(R"([{"role":"user","content":"<｜Assistant｜>"},
                                      {"role":"assistant","content":"ok"}])"));
  EXPECT_EQ(std::count(injected.tokens.begin(), injected.tokens.end(), sp.assistant), 2);

  EXPECT_THROW(
      trex::io::encode_chat(tok, nlohmann::json::parse(R"([{"role":"user","content":"q"}])")),
      trex::Error);
  try {
    trex::io::encode_chat(
        tok,
        nlohmann::json::parse(
            R"([{"role":"tool","content":"q"},{"role":"assistant","content":"a"}])"),
        "x.jsonl");
    FAIL() << "expected an error";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "messages[0].role");
    EXPECT_EQ(e.file_name(), "x.jsonl");
  }
}

TEST(TrainSftLoader, MultiTurnTrainsEveryAnswerOrOnlyTheLast) {
  const trex::io::Tokenizer tok = small_tokenizer();
  const auto& sp = tok.special_ids();
  const nlohmann::json messages = nlohmann::json::parse(R"([
    {"role": "user", "content": "solve"}, {"role": "assistant", "content": "x = 3"},
    {"role": "user", "content": "and y"}, {"role": "assistant", "content": "y = 4"}])");
  const auto all = trex::io::encode_chat(tok, messages, "m", true);
  const auto last = trex::io::encode_chat(tok, messages, "m", false);
  EXPECT_EQ(all.tokens, last.tokens);
  const std::vector<int32_t> a1 = tok.encode("x = 3"), a2 = tok.encode("y = 4");
  auto trained = [](const trex::io::EncodedChat& c) {
    return std::count_if(c.labels.begin(), c.labels.end(), [](int32_t l) { return l != X; });
  };
  EXPECT_EQ(trained(all), static_cast<int64_t>(a1.size() + a2.size() + 2));
  EXPECT_EQ(trained(last), static_cast<int64_t>(a2.size() + 1));
  EXPECT_EQ(std::count(all.labels.begin(), all.labels.end(), sp.eos), 2);
}

trex::io::EncodedChat fake_example(int id, int prompt, int answer) {
  trex::io::EncodedChat c;
  for (int k = 0; k < prompt; ++k) {
    c.tokens.push_back(100 * id + k);
    c.labels.push_back(X);
  }
  for (int k = 0; k < answer; ++k) {
    c.tokens.push_back(100 * id + 50 + k);
    c.labels.push_back(100 * id + 50 + k);
  }
  return c;
}

TEST(TrainSftLoader, PacksWholeExamplesWithMasksAndCountsOverlong) {
  std::vector<trex::io::EncodedChat> examples = {fake_example(1, 3, 2), fake_example(2, 2, 2),
                                                 fake_example(3, 4, 3), fake_example(4, 9, 3),
                                                 fake_example(5, 12, 0)};
  examples[4].labels.back() = examples[4].tokens.back();  // trained token only at position 11
  SftLoaderOptions o;
  o.seq_len = 10;
  o.batch_size = 2;
  o.shuffle = false;
  SftLoader loader(examples, /*pad_id=*/9, o);
  // #4 (12 tokens) is truncated to 10 and kept; #5 loses its only trained token and is dropped.
  EXPECT_EQ(loader.stats().examples, 5);
  EXPECT_EQ(loader.stats().truncated, 1);
  EXPECT_EQ(loader.stats().dropped, 1);
  EXPECT_EQ(loader.example_count(), 4);
  EXPECT_EQ(loader.stats().tokens, 5 + 4 + 7 + 10);
  EXPECT_EQ(loader.stats().trained_tokens, 2 + 2 + 3 + 1);
  // [#1 (5) #2 (4) pad 1] [#3 (7) pad 3] [#4 truncated (10)]
  EXPECT_EQ(loader.sequences_in_epoch(), 3);
  const PackedBatch b = loader.next_batch();
  EXPECT_EQ(b.batch.input_ids,
            (std::vector<int64_t>{100, 101, 102, 150, 151, 200, 201, 250, 251, 9,
                                  300, 301, 302, 303, 350, 351, 352, 9,   9,   9}));
  EXPECT_EQ(b.batch.labels, (std::vector<int64_t>{X, X, X, 150, 151, X,   X,   250, 251, X,
                                                  X, X, X, X,   350, 351, 352, X,   X,   X}));
  EXPECT_EQ(b.position_ids,
            (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2}));
  EXPECT_EQ(b.document_ids,
            (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
  const PackedBatch c = loader.next_batch();  // #4 then epoch 1 starts again with [#1 #2]
  EXPECT_EQ(c.batch.input_ids[0], 400);
  EXPECT_EQ(c.batch.labels[9], 450);  // kept: the first answer token survives truncation
  EXPECT_EQ(c.batch.input_ids[10], 100);
  EXPECT_EQ(loader.state().epoch, 1);

  o.overlong = trex::train::OverlongPolicy::kDrop;
  SftLoader dropping(examples, 9, o);
  EXPECT_EQ(dropping.stats().dropped, 2);
  EXPECT_EQ(dropping.stats().truncated, 0);
  EXPECT_EQ(dropping.example_count(), 3);
  o.seq_len = 2;
  EXPECT_THROW(SftLoader(examples, 9, o), trex::Error);  // nothing fits
}

TEST(TrainSftLoader, JsonlLoaderIsDeterministicAndResumable) {
  const trex::io::Tokenizer tok = small_tokenizer();
  trex::test::TempDir dir;
  std::vector<std::string> lines;
  for (int i = 0; i < 30; ++i) {
    nlohmann::json record = {
        {"messages",
         {{{"role", "user"}, {"content", "solve the model " + std::to_string(i)}},
          {{"role", "assistant"}, {"content", "the answer is x = " + std::to_string(i * 7)}}}}};
    lines.push_back(record.dump());
  }
  write_lines(dir.file("sft.jsonl"), lines);
  SftLoaderOptions o;
  o.seq_len = 64;
  o.batch_size = 2;
  o.seed = 3;
  SftLoader a = SftLoader::from_jsonl(dir.file("sft.jsonl"), tok, o);
  SftLoader b = SftLoader::from_jsonl(dir.file("sft.jsonl"), tok, o);
  EXPECT_EQ(a.example_count(), 30);
  EXPECT_EQ(a.stats().dropped + a.stats().truncated, 0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(same_batch(a.next_batch(), b.next_batch()));
  const std::string saved = a.state().to_json().dump();
  SftLoader resumed = SftLoader::from_jsonl(dir.file("sft.jsonl"), tok, o);
  resumed.restore(LoaderState::from_json(nlohmann::json::parse(saved)));
  const int64_t steps = 2 * a.sequences_in_epoch();
  for (int64_t i = 0; i < steps; ++i)
    ASSERT_TRUE(same_batch(a.next_batch(), resumed.next_batch())) << i;
  EXPECT_GE(a.state().epoch, 1);

  write_lines(dir.file("bad.jsonl"),
              {lines[0], R"({"messages": [{"role": "user", "content": 5}]})"});
  try {
    SftLoader::from_jsonl(dir.file("bad.jsonl"), tok, o, /*strict=*/true);
    FAIL() << "expected an error";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.line_number(), 2);
    EXPECT_EQ(e.field_name(), "messages[0].content");
  }
  // Lenient (the default): the bad record is skipped and counted.
  SftLoader lenient = SftLoader::from_jsonl(dir.file("bad.jsonl"), tok, o);
  EXPECT_EQ(lenient.stats().examples, 1);
  EXPECT_EQ(lenient.stats().input.skipped, 1);
  ASSERT_EQ(lenient.stats().input.skips.size(), 1u);
  EXPECT_EQ(lenient.stats().input.skips[0].line, 2);
}

}  // namespace
