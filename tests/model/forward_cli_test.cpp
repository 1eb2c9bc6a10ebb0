// `trex forward`, the public parity interface, as a user runs it.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/io/safetensors.hpp"

namespace {

using trex::test::run_trex;

nlohmann::json last_json_line(const std::string& output) {
  const size_t start = output.rfind("{\"");
  return nlohmann::json::parse(output.substr(start));
}

TEST(ForwardCli, RunsOnEveryTinyConfigWithGradients) {
  trex::test::TempDir dir;
  trex::write_file_atomic(dir.file("tokens.json"),
                          "[[1,5,9,200,7,3,8,2,11,40,41,42,43,44,45,46,47,48,49,50],"
                          "[3,3,3,3,4,4,4,4,5,5,5,5,6,6,6,6,7,7,7,7]]");
  for (const std::string name : {"tiny-v4", "tiny-v4-clamp"}) {
    const std::string out = dir.file(name + ".safetensors");
    const auto r =
        run_trex("forward --config " + trex::test::source_dir() + "/configs/models/" + name +
                 ".json --seed 3 --tokens " + dir.file("tokens.json") + " --grads --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto summary = last_json_line(r.output);
    EXPECT_TRUE(std::isfinite(summary["loss"].get<double>()));
    EXPECT_EQ(summary["lm_tokens"].get<int64_t>(), 2 * 19);
    const auto reader = trex::CheckpointReader::open(out);
    EXPECT_EQ(reader.get("logits").shape, (std::vector<int64_t>{2, 20, 512}));
    EXPECT_TRUE(reader.contains("grad.embed.weight"));
    EXPECT_TRUE(reader.contains("grad.layers.1.ffn.experts.0.w1.weight"));
    EXPECT_TRUE(reader.contains("grad.mtp.0.e_proj.weight"));
    // The logits at a masked-free position reproduce the reported loss's scale.
    EXPECT_NEAR(reader.read_f32("loss")[0], summary["loss"].get<double>(), 1e-5);
  }
}

TEST(ForwardCli, ParityFixtureThroughTheCli) {
  // Loads the transformers-scheme fixture checkpoint; gradients come back under
  // the port's names and the loss equals the oracle's.
  const std::string fx = trex::test::source_dir() + "/tests/fixtures/v4/tiny-v4-clamp";
  trex::test::TempDir dir;
  const auto r = run_trex("forward --checkpoint " + fx + "/model --tokens " + fx +
                          "/case_S24.safetensors --grads --out " + dir.file("out.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = trex::CheckpointReader::open(dir.file("out.safetensors"));
  const auto want = trex::CheckpointReader::open(fx + "/case_S24.safetensors");
  EXPECT_NEAR(out.read_f32("loss_lm")[0], want.read_f32("loss_lm")[0], 1e-4);
  EXPECT_TRUE(out.contains("grad.model.layers.0.mlp.experts.gate_up_proj"));
  EXPECT_TRUE(out.contains("grad.lm_head.weight"));
}

TEST(ForwardCli, BadInputsAreReported) {
  trex::test::TempDir dir;
  trex::write_file_atomic(dir.file("ragged.json"), "[[1,2,3],[4,5]]");
  const std::string cfg = trex::test::source_dir() + "/configs/models/tiny-v4.json";
  auto r = run_trex("forward --config " + cfg + " --tokens " + dir.file("ragged.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("ragged.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("same length"), std::string::npos) << r.output;
  trex::write_file_atomic(dir.file("oov.json"), "[[1,2,100000]]");
  r = run_trex("forward --config " + cfg + " --tokens " + dir.file("oov.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("vocabulary"), std::string::npos) << r.output;
  r = run_trex("forward --checkpoint " + dir.path() + " --tokens " + dir.file("oov.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;
}

}  // namespace
