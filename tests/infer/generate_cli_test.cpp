// `trex generate` end to end: a random tiny checkpoint + a trained tokenizer in
// a TempDir, prompts in the `trex or prompts` format, completions out.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/dtypes.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/infer/generate.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/model/model.hpp"
#include "trex/train/data/sft.hpp"

namespace {

using trex::test::run_trex;

trex::io::Tokenizer small_tokenizer() {
  trex::io::TokenizerTrainOptions o;
  o.vocab_size = 320;
  o.show_progress = false;
  return trex::io::Tokenizer::train_from_texts(
      {"minimize the cost of shipping goods from plants to markets",
       "maximize profit subject to capacity", "the answer is x = 3 and y = 4"},
      o);
}

// tiny-v4 (vocabulary 512 >= the tokenizer's 320) with random weights.
void write_checkpoint(const std::string& dir) {
  trex::model::Model<float> m(
      trex::model::ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json"));
  m.init_random(21);
  for (float& v : m.params().values()) v *= 4.0f;  // sharper logits than the 0.02 init
  trex::model::save_checkpoint(dir, m.config(), m.params(), m.hash_tables(),
                               trex::model::NamingScheme::kReleased, trex::DType::kF32);
  small_tokenizer().save(dir + "/tokenizer.json");
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
}

const std::vector<std::string> kPrompts = {
    R"({"id": "a-1", "source": "bench", "prompt": "minimize cost", "messages": [{"role": "user", "content": "minimize the cost"}]})",
    R"({"id": "a-2", "source": "bench", "prompt": "maximize profit"})",
    R"({"id": 7, "source": "other", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x = 3"}]})"};

TEST(GenerateCli, PromptIsTheChatTemplateUpToTheAnswer) {
  const auto tok = small_tokenizer();
  const auto& sp = tok.special_ids();
  const nlohmann::json messages = nlohmann::json::array(
      {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "x = 3"}}});
  const auto prompt = trex::io::encode_chat_prompt(tok, messages);
  std::vector<int32_t> want = {sp.bos};
  for (int32_t t : tok.encode("be brief")) want.push_back(t);
  want.push_back(sp.user);
  for (int32_t t : tok.encode("x = 3")) want.push_back(t);
  want.push_back(sp.assistant);
  want.push_back(sp.end_think);
  EXPECT_EQ(prompt, want);
  // The SFT rendering of the answered conversation starts with the prompt.
  nlohmann::json answered = messages;
  answered.push_back({{"role", "assistant"}, {"content", "y = 4"}});
  const auto full = trex::io::encode_chat(tok, answered).tokens;
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), full.begin()));
  EXPECT_THROW(trex::io::encode_chat_prompt(tok, nlohmann::json::array()), trex::Error);
}

TEST(GenerateCli, GreedyCompletionsMatchTheLibrary) {
  trex::test::TempDir dir;
  const std::string ckpt = dir.path() + "/ckpt";
  std::filesystem::create_directories(ckpt);
  write_checkpoint(ckpt);
  const std::string prompts = dir.path() + "/prompts.jsonl", out = dir.path() + "/out.jsonl";
  write_lines(prompts, kPrompts);
  const auto r = run_trex("generate --checkpoint " + ckpt + " --prompts " + prompts + " --out " +
                          out + " --max-new-tokens 6 --batch-size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("generated 3 completions for 3 prompts"), std::string::npos) << r.output;
  const auto records = trex::read_jsonl(out);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0]["id"], "a-1");
  EXPECT_EQ(records[1]["source"], "bench");
  EXPECT_EQ(records[2]["id"], 7);

  // The same prompts through the library function on the same checkpoint.
  const auto tok = trex::io::Tokenizer::load(ckpt + "/tokenizer.json");
  const auto model = trex::model::Model<float>::from_checkpoint(ckpt);
  std::vector<std::vector<int32_t>> ids;
  for (const auto& line : kPrompts) {
    const auto rec = nlohmann::json::parse(line);
    ids.push_back(trex::io::encode_chat_prompt(
        tok, rec.contains("messages")
                 ? rec["messages"]
                 : nlohmann::json::array({{{"role", "user"}, {"content", rec["prompt"]}}})));
    EXPECT_EQ(ids.back().back(), tok.special_ids().end_think);
    EXPECT_EQ(ids.back()[ids.back().size() - 2], tok.special_ids().assistant);
  }
  trex::infer::GenerateOptions o;
  o.max_new_tokens = 6;
  o.batch_size = 2;  // float: the same batch composition gives the same rounding
  const auto g = trex::infer::generate(model, tok, ids, o);
  for (size_t p = 0; p < records.size(); ++p) {
    ASSERT_TRUE(records[p]["completion"].is_string());
    EXPECT_EQ(records[p]["completion"], g.texts[p][0]);
    EXPECT_EQ(records[p]["tokens"], g.tokens[p][0].size());
    EXPECT_LE(records[p]["tokens"].get<int64_t>(), 6);
    EXPECT_EQ(records[p]["prompt_tokens"], ids[p].size());
  }
  EXPECT_GT(g.generated_tokens, 0);

  // The in-process file API writes the same records.
  const std::string out2 = dir.path() + "/out2.jsonl";
  const auto stats = trex::infer::generate_file(model, tok, prompts, out2, o, /*progress=*/false);
  EXPECT_EQ(trex::read_jsonl(out2), records);
  EXPECT_EQ(stats.prompts, 3);
  EXPECT_EQ(stats.completions, 3);
  EXPECT_EQ(stats.generated_tokens, g.generated_tokens);
  EXPECT_EQ(stats.prompt_tokens, g.prompt_tokens);
}

TEST(GenerateCli, SeveralSampledCompletionsPerPrompt) {
  trex::test::TempDir dir;
  const std::string ckpt = dir.path() + "/ckpt";
  std::filesystem::create_directories(ckpt);
  write_checkpoint(ckpt);
  std::filesystem::rename(ckpt + "/tokenizer.json", dir.path() + "/tok.json");
  const std::string prompts = dir.path() + "/prompts.jsonl", out = dir.path() + "/out.jsonl";
  write_lines(prompts, {kPrompts[0], kPrompts[1]});
  const std::string args = "generate --checkpoint " + ckpt + " --prompts " + prompts + " --out " +
                           out + " --tokenizer " + dir.path() +
                           "/tok.json --max-new-tokens 5 --temperature 1.5 --top-p 0.95 --n 3 "
                           "--seed 4";
  auto r = run_trex(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto first = trex::read_jsonl(out);
  ASSERT_EQ(first.size(), 2u);
  for (const auto& rec : first) {
    ASSERT_TRUE(rec["completions"].is_array());
    EXPECT_EQ(rec["completions"].size(), 3u);
    EXPECT_EQ(rec["tokens"].size(), 3u);
    EXPECT_FALSE(rec.contains("completion"));
  }
  r = run_trex(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(trex::read_jsonl(out), first);  // seeded: the same run gives the same samples
}

TEST(GenerateCli, BadPromptNamesFileAndLine) {
  trex::test::TempDir dir;
  const std::string ckpt = dir.path() + "/ckpt";
  std::filesystem::create_directories(ckpt);
  write_checkpoint(ckpt);
  const std::string prompts = dir.path() + "/prompts.jsonl";
  write_lines(prompts,
              {kPrompts[0], R"({"id": "b", "messages": [{"role": "robot", "content": "x"}]})"});
  const auto r = run_trex("generate --strict --checkpoint " + ckpt + " --prompts " + prompts +
                          " --out " + dir.path() + "/out.jsonl");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("prompts.jsonl"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(":2"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/out.jsonl"));
  // Without --strict the bad prompt is skipped and counted (exit 3), the good one generated.
  const auto lenient = run_trex("generate --checkpoint " + ckpt + " --prompts " + prompts +
                                " --out " + dir.path() + "/out.jsonl");
  EXPECT_EQ(lenient.exit_code, 3) << lenient.output;
  EXPECT_NE(lenient.output.find("prompts.jsonl:2"), std::string::npos) << lenient.output;
  EXPECT_NE(lenient.output.find("1 record, 1 line skipped"), std::string::npos) << lenient.output;
  EXPECT_EQ(trex::read_jsonl(dir.path() + "/out.jsonl").size(), 1u);
}

}  // namespace

namespace {

// `trex or prompts` → `trex generate` → `trex or eval`: the formats fit together.
TEST(GenerateCli, PromptsGenerateEvalPipeline) {
  trex::test::TempDir dir;
  const std::string ckpt = dir.path() + "/ckpt";
  std::filesystem::create_directories(ckpt);
  write_checkpoint(ckpt);
  const std::string bench = dir.path() + "/bench.jsonl";
  write_lines(bench, {R"({"id": 0, "question": "minimize the cost", "answer": 7.0})",
                      R"({"id": 1, "question": "maximize profit", "answer": 3.0})"});
  auto r =
      run_trex("or prompts --bench " + bench + " --format lp --out " + dir.path() + "/p.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* n : {"1", "2"}) {
    r = run_trex("generate --checkpoint " + ckpt + " --prompts " + dir.path() + "/p.jsonl --out " +
                 dir.path() +
                 "/c.jsonl --max-new-tokens 8 --temperature 1 "
                 "--n " +
                 n);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_trex("or eval --quiet --bench " + bench + " --completions " + dir.path() +
                 "/c.jsonl --out " + dir.path() + "/eval");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto report = nlohmann::json::parse(std::ifstream(dir.path() + "/eval/report.json"));
    EXPECT_NEAR(report["benchmarks"]["bench"]["pass@1"].get<double>(), 0.0, 1e-9) << n;
    EXPECT_EQ(trex::read_jsonl(dir.path() + "/eval/items.jsonl").size(),
              std::string(n) == "1" ? 2u : 4u)
        << n;
  }
}

}  // namespace

// `mpirun -np N trex demo` generates one block of a prompts file per rank:
// the blocks joined in order are the whole file's records, samples included
// (each prompt keeps its seed stream; batch 1 so that float rounding does not
// depend on which prompts share a batch).
TEST(GenerateCli, ShardsJoinedInOrderEqualTheWholeFile) {
  trex::test::TempDir dir;
  const std::string ckpt = dir.path() + "/ckpt";
  std::filesystem::create_directories(ckpt);
  write_checkpoint(ckpt);
  const std::string prompts = dir.path() + "/prompts.jsonl";
  write_lines(prompts, kPrompts);
  const auto tok = trex::io::Tokenizer::load(ckpt + "/tokenizer.json");
  const auto model = trex::model::Model<float>::from_checkpoint(ckpt);
  trex::infer::GenerateOptions o;
  o.max_new_tokens = 8;
  o.batch_size = 1;
  o.samples = 2;
  o.sampling.temperature = 1.5;
  o.seed = 5;
  const std::string whole = dir.path() + "/whole.jsonl";
  trex::infer::generate_file(model, tok, prompts, whole, o, false);
  const auto expected = trex::read_jsonl(whole);
  ASSERT_EQ(expected.size(), 3u);
  for (int count : {2, 3}) {
    std::vector<nlohmann::json> joined;
    int64_t generated = 0;
    for (int index = 0; index < count; ++index) {
      const std::string part = dir.path() + "/part" + std::to_string(index) + ".jsonl";
      const auto stats =
          trex::infer::generate_file(model, tok, prompts, part, o, false, {index, count});
      generated += stats.prompts;
      for (auto& r : trex::read_jsonl(part)) joined.push_back(r);
    }
    EXPECT_EQ(generated, 3) << count;
    EXPECT_EQ(joined, expected) << count << " shards";
  }
  // Shard 0 of 2 holds prompt 0 only (blocks [0, 1) and [1, 3)).
  const std::string first = dir.path() + "/first.jsonl";
  trex::infer::generate_file(model, tok, prompts, first, o, false, {0, 2});
  ASSERT_EQ(trex::read_jsonl(first).size(), 1u);
  EXPECT_EQ(trex::read_jsonl(first)[0]["id"], "a-1");
  EXPECT_THROW(trex::infer::generate_file(model, tok, prompts, first, o, false, {2, 2}),
               trex::Error);
}
