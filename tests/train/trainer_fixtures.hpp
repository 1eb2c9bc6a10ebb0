#pragma once
// A tiny training setup shared by the trainer tests: a tokenizer trained in the
// test, a handful of CPT documents and SFT chats, and a run config on tiny-v4.
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_paths.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/train/run_config.hpp"

namespace trex::test {

inline std::vector<std::string> tiny_corpus() {
  return {"minimize the cost of shipping goods from plants to markets",
          "the answer is x = 3 and y = 4",
          "maximize profit subject to capacity 12 and demand 7",
          "each plant ships at most its supply; each market gets its demand",
          "variables x1 x2 x3 are non-negative integers",
          "solve the model and report the objective value 42"};
}

// A `trex train` run config (JSON, paths relative to the run directory) for a
// directory holding write_tiny_training_data's files: tiny-v4, CPT, one
// sequence of `seq_len` tokens per step, output in out/.
inline nlohmann::json tiny_cpt_run_json(int steps, int seq_len) {
  return {{"model", {{"config", source_dir() + "/configs/models/tiny-v4.json"}}},
          {"tokenizer", "tokenizer.json"},
          {"data", {{"mode", "cpt"}, {"train", "cpt.jsonl"}}},
          {"seq_len", seq_len},
          {"micro_batch", 1},
          {"global_batch", 1},
          {"steps", steps},
          {"out_dir", "out"},
          {"peak_gflops", 10.0}};
}

// Writes tokenizer.json, cpt.jsonl, sft.jsonl (and validation copies) into `dir`.
inline void write_tiny_training_data(const std::string& dir) {
  io::TokenizerTrainOptions o;
  o.vocab_size = 300;
  o.show_progress = false;
  std::vector<std::string> texts = tiny_corpus();
  texts.push_back("You are a helpful assistant.");
  io::Tokenizer::train_from_texts(texts, o).save(dir + "/tokenizer.json");
  std::ofstream cpt(dir + "/cpt.jsonl"), sft(dir + "/sft.jsonl");
  for (const auto& t : tiny_corpus()) cpt << nlohmann::json{{"text", t}}.dump() << "\n";
  const std::vector<std::pair<std::string, std::string>> chats = {
      {"what is x?", "x = 3"},
      {"minimize the cost of shipping goods", "the answer is x = 3 and y = 4"},
      {"maximize profit", "capacity 12 and demand 7"},
      {"report the objective", "the objective value 42"},
      {"solve the model", "variables x1 x2 x3 are non-negative integers"}};
  for (const auto& [q, a] : chats)
    sft << nlohmann::json{{"messages",
                           {{{"role", "user"}, {"content", q}},
                            {{"role", "assistant"}, {"content", a}}}}}
               .dump()
        << "\n";
}

inline train::RunConfig tiny_run_config(const std::string& dir, train::DataMode mode) {
  train::RunConfig c;
  c.model_config = source_dir() + "/configs/models/tiny-v4.json";
  c.init_seed = 7;
  c.tokenizer = dir + "/tokenizer.json";
  c.mode = mode;
  c.train_file = dir + (mode == train::DataMode::kCpt ? "/cpt.jsonl" : "/sft.jsonl");
  c.data_seed = 3;
  c.seq_len = 24;
  c.micro_batch = 1;
  c.global_batch = 2;
  c.steps = 4;
  c.peak_lr = 3e-3;
  c.min_lr = 3e-4;
  c.warmup_steps = 1;
  c.clip = 1.0;
  c.balance_weight = 1e-3;
  c.router_bias_speed = 1e-3;
  c.out_dir = dir + "/run";
  c.peak_gflops = 1.0;  // no measurement in tests
  return c;
}

}  // namespace trex::test
