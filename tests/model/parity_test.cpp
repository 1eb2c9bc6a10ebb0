// Parity with the independent oracle (reference/make_v4_fixtures.py: the
// transformers DeepSeek-V4 port in float64 + a spec-based MTP module). The
// fixtures are committed under tests/fixtures/v4/<config>/.
//
// Tie order: the outputs depend on which block the indexer picks among exactly
// equal scores (frequent at random init: ReLU-zeroed blocks score exactly 0).
// torch.topk leaves that order unspecified; the oracle breaks ties like the
// engine (lower block index first, indexer.hpp ranks_before) and records its
// top-k decisions in the fixture metadata. check_indexer_decisions asserts the
// engine makes the same decisions: the same tie rule, the same number of
// decisions and of exact ties, no tie between non-zero scores, and untied
// decisions far enough from the boundary that rounding cannot reorder them.
// A fixture regenerated with another tie rule, or whose ties differ, fails
// there with its reason rather than as an unexplained logit mismatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "test_paths.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/model/indexer.hpp"
#include "trex/model/model.hpp"

namespace {

using trex::CheckpointReader;
namespace fs = std::filesystem;

std::vector<std::string> fixture_configs() {
  std::vector<std::string> dirs;
  const fs::path root = fs::path(trex::test::source_dir()) / "tests/fixtures/v4";
  if (!fs::exists(root)) return dirs;
  for (const auto& entry : fs::directory_iterator(root))
    if (fs::exists(entry.path() / "model" / "config.json")) dirs.push_back(entry.path().string());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

std::vector<std::string> case_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("case_", 0) == 0 && entry.path().extension() == ".safetensors")
      files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Tensor group for the report: the released-name part after the layer index.
std::string group_of(const std::string& name) {
  const std::string n = name.substr(std::string("grad.").size());
  // Drop the block index so the same tensor of every layer forms one group.
  for (const auto& [prefix, label] :
       {std::pair<std::string, std::string>{"model.layers.", ""}, {"mtp.", "mtp."}}) {
    if (n.rfind(prefix, 0) == 0) return label + n.substr(n.find('.', prefix.size()) + 1);
  }
  return n;
}

// The generator's margin threshold (reference/make_v4_fixtures.py MIN_MARGIN).
constexpr double kMinFixtureMargin = 1e-4;

// margin_tol: relative agreement of the smallest untied indexer margin with the
// oracle's (the fixture stores 7 digits; float scores move it by ~1e-7/margin).
void check_indexer_decisions(const std::string& file, const trex::model::IndexerSelectionStats& got,
                             double margin_tol, bool print) {
  SCOPED_TRACE("indexer top-k decisions of " + file);
  const CheckpointReader fx = CheckpointReader::open(file);
  const auto& meta = fx.metadata();
  auto value = [&](const std::string& key) {
    EXPECT_TRUE(meta.contains(key)) << "fixture metadata lacks " << key;
    return meta.contains(key) ? meta[key].get<std::string>() : std::string("nan");
  };
  ASSERT_EQ(value("indexer_tie_break"),
            "exactly equal scores: lower block index first (stable sort)")
      << "the fixture breaks indexer ties differently from the engine (docs/engine.md)";
  EXPECT_EQ(got.decisions, std::stoll(value("indexer_decisions")));
  EXPECT_EQ(got.boundary_ties, got.zero_ties) << "an exact tie between non-zero scores";
  EXPECT_EQ(got.zero_ties, std::stoll(value("indexer_exact_zero_ties")));
  const double want_margin = std::stod(value("min_indexer_margin"));
  EXPECT_NEAR(got.min_margin, want_margin, margin_tol * want_margin);
  EXPECT_GT(got.min_margin, kMinFixtureMargin);
  // Zero blocks stay exactly 0 (so their ties stay exact) when every head's
  // q·k is clearly negative.
  EXPECT_GT(got.min_zero_block_relu_margin, kMinFixtureMargin);
  if (print)
    std::cout << "  indexer: " << got.decisions << " top-k decisions, " << got.zero_ties
              << " exact 0 == 0 ties at the boundary (lower index first), min untied margin "
              << got.min_margin << " (oracle " << want_margin << "), min zero-block ReLU margin "
              << got.min_zero_block_relu_margin << "\n";
}

template <class T>
void run_parity(double logits_tol, double grad_tol, double margin_tol, bool print) {
  const auto configs = fixture_configs();
  ASSERT_FALSE(configs.empty())
      << "no fixtures under tests/fixtures/v4 (run reference/make_v4_fixtures.py)";
  for (const std::string& dir : configs) {
    trex::model::NamingScheme scheme;
    auto m = trex::model::Model<T>::from_checkpoint(dir + "/model", &scheme);
    EXPECT_EQ(scheme, trex::model::NamingScheme::kTransformers);
    const auto cases = case_files(dir);
    ASSERT_FALSE(cases.empty()) << dir;
    trex::model::IndexerSelectionStats indexer_stats;  // over all cases, as the fixture's
    trex::model::IndexerSelectionProbe probe(indexer_stats);
    for (const std::string& file : cases) {
      SCOPED_TRACE(file);
      const CheckpointReader fx = CheckpointReader::open(file);
      trex::model::Batch batch;
      const auto& ids = fx.get("input_ids");
      batch.B = ids.shape[0];
      batch.S = ids.shape[1];
      batch.input_ids = fx.read_i64("input_ids");
      if (fx.contains("labels")) batch.labels = fx.read_i64("labels");
      trex::model::LossOptions loss;
      loss.mtp_weight = fx.metadata().contains("mtp_weight")
                            ? std::stod(fx.metadata()["mtp_weight"].get<std::string>())
                            : 0.3;
      m.params().zero_grads();
      const int64_t V = m.config().vocab_size;
      std::vector<T> logits(static_cast<size_t>(batch.B * batch.S * V));
      const auto result = m.forward_backward(batch, loss, {}, logits.data());

      const std::vector<float> want_logits = fx.read_f32("logits");
      ASSERT_EQ(want_logits.size(), logits.size());
      double max_diff = 0, max_ref = 0;
      for (size_t i = 0; i < logits.size(); ++i) {
        max_diff = std::max(max_diff, std::abs(static_cast<double>(logits[i]) - want_logits[i]));
        max_ref = std::max(max_ref, std::abs(static_cast<double>(want_logits[i])));
      }
      const double logits_rel = max_diff / max_ref;
      EXPECT_LE(logits_rel, logits_tol);
      const double want_lm = fx.read_f32("loss_lm")[0];
      EXPECT_LE(std::abs(result.lm - want_lm) / std::abs(want_lm), logits_tol)
          << result.lm << " vs " << want_lm;
      if (fx.contains("loss_mtp")) {
        const double want_mtp = fx.read_f32("loss_mtp")[0];
        EXPECT_LE(std::abs(result.mtp - want_mtp) / std::abs(want_mtp), logits_tol)
            << result.mtp << " vs " << want_mtp;
      }

      const auto grads =
          trex::model::export_tensors(m.config(), m.params(), true, scheme, nullptr, "grad.");
      std::map<std::string, double> worst;
      int64_t compared = 0;
      for (const auto& g : grads) {
        ASSERT_TRUE(fx.contains(g.name)) << "fixture lacks " << g.name;
        const std::vector<float> want = fx.read_f32(g.name);
        ASSERT_EQ(want.size(), g.f32.size()) << g.name;
        double num = 0, den = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          const double d = static_cast<double>(g.f32[i]) - want[i];
          num += d * d;
          den += static_cast<double>(want[i]) * want[i];
        }
        const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
        if (den > 0) {
          EXPECT_LE(rel, grad_tol) << g.name;
        } else {
          EXPECT_LE(std::sqrt(num), 1e-6) << g.name << " should be zero";
        }
        double& w = worst[group_of(g.name)];
        w = std::max(w, rel);
        ++compared;
      }
      EXPECT_GT(compared, 50);
      if (print) {
        std::cout << fs::path(file).filename().string() << " (" << fs::path(dir).filename().string()
                  << "): logits rel " << logits_rel << ", loss_lm " << result.lm << ", loss_mtp "
                  << result.mtp << ", grads compared " << compared << "\n";
        for (const auto& [group, rel] : worst) std::cout << "    " << group << "  " << rel << "\n";
      }
    }
    check_indexer_decisions(cases.front(), indexer_stats, margin_tol, print);
  }
}

TEST(V4Parity, Float32MatchesOracle) {
  run_parity<float>(1e-4, 1e-3, 1e-2, std::getenv("TREX_PARITY_REPORT") != nullptr);
}

// Double precision isolates implementation differences from fp32 rounding: the
// fixture values themselves are fp32-rounded, so agreement is at ~1e-6.
TEST(V4Parity, Float64MatchesOracleTightly) {
  run_parity<double>(2e-6, 2e-5, 1e-5, false);
}

}  // namespace

namespace {

// The oracle also saved each model under the released names (verified there to
// load bit-identically through transformers' own released->port conversion):
// both schemes must load to the same flat parameters.
TEST(V4Parity, ReleasedAndTransformersNamingLoadIdentically) {
  for (const std::string& dir : fixture_configs()) {
    trex::model::NamingScheme a, b;
    const auto port = trex::model::Model<float>::from_checkpoint(dir + "/model", &a);
    const auto released = trex::model::Model<float>::from_checkpoint(dir + "/released", &b);
    EXPECT_EQ(a, trex::model::NamingScheme::kTransformers);
    EXPECT_EQ(b, trex::model::NamingScheme::kReleased);
    EXPECT_EQ(port.params().values(), released.params().values()) << dir;
    EXPECT_EQ(port.hash_tables(), released.hash_tables()) << dir;
  }
}

}  // namespace
