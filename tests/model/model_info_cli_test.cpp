// `trex model info` as a user runs it, on the shipped configs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"

namespace trex {
namespace {

using test::CliRun;
using test::run_trex;

std::string config(const std::string& name) {
  return test::source_dir() + "/configs/models/" + name + ".json";
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(ModelInfoCli, FlashPrintsModelCardNumbers) {
  CliRun r = run_trex("model info --config " + config("deepseek-v4-flash"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "total 284B (284.3B")) << r.output;
  EXPECT_TRUE(has(r.output, "activated/token 13B (13.27B")) << r.output;
  EXPECT_TRUE(has(r.output, "MTP +6.610B")) << r.output;
  EXPECT_TRUE(has(r.output, "2 SWA, 21 CSA")) << r.output;
  EXPECT_TRUE(has(r.output, "20 HCA")) << r.output;
  EXPECT_TRUE(has(r.output, "SWA+hash SWA+hash CSA+hash HCA128 CSA")) << r.output;
  EXPECT_TRUE(has(r.output, "| MTP: SWA")) << r.output;
  EXPECT_TRUE(has(r.output, "90.78 GFLOP at seq 4096")) << r.output;

  r = run_trex("model info --seq 32768 --config " + config("deepseek-v4-flash"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "99.99 GFLOP at seq 32768")) << r.output;
}

TEST(ModelInfoCli, ProPrintsModelCardNumbers) {
  CliRun r = run_trex("model info --config " + config("deepseek-v4-pro"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "total 1.6T (1.573T")) << r.output;
  EXPECT_TRUE(has(r.output, "activated/token 49B (48.85B")) << r.output;
}

TEST(ModelInfoCli, JsonOutput) {
  CliRun r = run_trex("model info --json --config " + config("deepseek-v4-flash"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_NEAR(j["params"]["total"].get<double>(), 284.33e9, 0.01e9);
  EXPECT_NEAR(j["params"]["activated"].get<double>(), 13.27e9, 0.01e9);
  EXPECT_EQ(j["params"]["total_rounded"], "284B");
  EXPECT_EQ(j["params"]["activated_rounded"], "13B");
  EXPECT_NEAR(j["flops_per_token"]["total"].get<double>(), 90.8e9, 0.005 * 90.8e9);
  EXPECT_EQ(j["layers"].size(), 44u);
  EXPECT_EQ(j["layers"][43]["mtp"], true);
  EXPECT_EQ(j["layers"][2]["attention"], "CSA");
}

TEST(ModelInfoCli, BadConfigNamesFileAndKey) {
  test::TempDir dir;
  std::string path = dir.file("bad.json");
  write_file_atomic(path, "{\"model_type\": \"deepseek_v4\", \"vocab_size\": \"many\"}");
  CliRun r = run_trex("model info --config " + path);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, path)) << r.output;
  EXPECT_TRUE(has(r.output, "field 'vocab_size'")) << r.output;
  r = run_trex("model info --config " + config("tiny-v4") + " --seq 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(run_trex("model info --help").exit_code, 0);
}

TEST(ModelInfoCli, ConvertConfigToTransformersScheme) {
  test::TempDir dir;
  std::string out = dir.file("tiny-port.json");
  CliRun r = run_trex("model convert-config --scheme transformers --config " + config("tiny-v4") +
                      " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(j["layer_types"][2], "heavily_compressed_attention");
  EXPECT_EQ(j["compress_rates"]["heavily_compressed_attention"], 16);
  EXPECT_EQ(j["mlp_layer_types"][1], "hash_moe");
  EXPECT_EQ(j["rope_parameters"]["compress"]["rope_type"], "yarn");
  EXPECT_FALSE(j.contains("compress_ratios"));
  // Converted back, it is the original config again.
  r = run_trex("model convert-config --scheme released --config " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json back = nlohmann::json::parse(r.output);
  r = run_trex("model convert-config --scheme released --config " + config("tiny-v4"));
  EXPECT_EQ(back, nlohmann::json::parse(r.output));
  EXPECT_EQ(back["compress_ratios"], nlohmann::json({0, 4, 16, 4, 0}));
  EXPECT_NE(run_trex("model convert-config --scheme hf --config " + out).exit_code, 0);
}

}  // namespace
}  // namespace trex
