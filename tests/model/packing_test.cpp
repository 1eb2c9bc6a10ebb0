// Packed sequences (Batch::position_ids / document_ids): a row holding several
// documents must give exactly the losses and gradients of running every document
// as a sequence of its own, on the tiny V4 config (SWA, CSA with the indexer,
// HCA, hash and score routing, MTP).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/model/model.hpp"

namespace {

using trex::model::Batch;
using trex::model::LossBreakdown;
using trex::model::LossOptions;
using trex::model::Model;
using trex::model::ModelConfig;

ModelConfig tiny() {
  return ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json");
}

// Random init plus non-trivial values for the tensors init leaves at 0/1 (sinks,
// ape, mHC gates, router bias), so every path carries gradient.
template <class T>
void randomize(Model<T>& m, uint64_t seed) {
  m.init_random(seed);
  trex::Rng rng(seed, {77});
  for (const auto& spec : m.params().specs()) {
    const std::string& n = spec.name;
    const bool small =
        n.find("norm.weight") != std::string::npos || n.find("_scale") != std::string::npos ||
        n.find("_base") != std::string::npos || n.find("attn_sink") != std::string::npos ||
        n.find(".ape") != std::string::npos || n.find("gate.bias") != std::string::npos;
    if (!small) continue;
    T* v = m.params().value(n);
    for (int64_t i = 0; i < spec.numel(); ++i)
      v[i] += static_cast<T>(0.3 * (2 * rng.uniform() - 1));
  }
}

struct Document {
  std::vector<int64_t> ids, labels;
};

// Row 0: documents of 21, 1 and 10 tokens; row 1: 17 and 6 tokens and 9 padding
// tokens (labels −100). Lengths that are not multiples of the compression ratios
// (4, 16), one long enough for the indexer to choose among > top-k blocks.
constexpr int64_t kS = 32;
const std::vector<std::vector<int64_t>> kRowLengths = {{21, 1, 10}, {17, 6, 9}};

std::vector<std::vector<Document>> make_documents(const ModelConfig& c, uint64_t seed) {
  trex::Rng rng(seed, {11});
  std::vector<std::vector<Document>> rows;
  for (size_t b = 0; b < kRowLengths.size(); ++b) {
    std::vector<Document> docs;
    for (size_t k = 0; k < kRowLengths[b].size(); ++k) {
      const bool padding = b == 1 && k + 1 == kRowLengths[b].size();
      Document d;
      for (int64_t t = 0; t < kRowLengths[b][k]; ++t) {
        d.ids.push_back(padding ? 1 : rng.uniform_int(int64_t{0}, c.vocab_size - 1));
        d.labels.push_back(padding ? -100 : d.ids.back());
      }
      if (!padding && d.labels.size() > 5) d.labels[4] = -100;  // a masked target inside
      docs.push_back(d);
    }
    rows.push_back(docs);
  }
  return rows;
}

Batch packed_batch(const std::vector<std::vector<Document>>& rows, bool with_positions,
                   bool with_documents) {
  Batch batch;
  batch.B = static_cast<int64_t>(rows.size());
  batch.S = kS;
  int64_t doc_id = 0;
  for (const auto& docs : rows) {
    for (const Document& d : docs) {
      for (size_t t = 0; t < d.ids.size(); ++t) {
        batch.input_ids.push_back(d.ids[t]);
        batch.labels.push_back(d.labels[t]);
        if (with_positions) batch.position_ids.push_back(static_cast<int64_t>(t));
        if (with_documents) batch.document_ids.push_back(doc_id);
      }
      ++doc_id;
    }
  }
  return batch;
}

Batch single(const Document& d) {
  Batch batch;
  batch.B = 1;
  batch.S = static_cast<int64_t>(d.ids.size());
  batch.input_ids = d.ids;
  batch.labels = d.labels;
  return batch;
}

// The packed row's losses are means over all of its targets; each document run
// alone normalises by its own counts. Run document i with MTP weight
// λ_i = λ·M_i·T/(M·T_i) and scale its gradient by T_i/T: the sum is then the
// gradient of Σ CE/T + λ Σ MCE/M, the packed loss (T, M: LM / MTP targets).
// The indexer is trained only by its KL loss, a plain sum over tokens.
template <class T>
struct Reference {
  double lm_sum = 0, mtp_sum = 0, indexer = 0;
  int64_t lm_tokens = 0, mtp_tokens = 0;
  std::vector<double> grads;
  std::vector<std::vector<int64_t>> expert_load;
};

template <class T>
Reference<T> run_separately(Model<T>& m, const std::vector<std::vector<Document>>& rows,
                            const LossOptions& loss, int64_t total_lm, int64_t total_mtp) {
  Reference<T> ref;
  ref.grads.assign(m.params().grads().size(), 0.0);
  std::vector<bool> indexer_param(ref.grads.size(), false);
  for (const auto& spec : m.params().specs())
    if (spec.name.find("indexer") != std::string::npos)
      std::fill_n(indexer_param.begin() + m.params().offset(spec.name), spec.numel(), true);
  for (const auto& docs : rows)
    for (const Document& d : docs) {
      // Count this document's targets with a forward pass first.
      LossOptions count = loss;
      count.mtp_weight = 1.0;
      const LossBreakdown probe = m.forward_backward(single(d), count, {false, false});
      LossOptions weighted = loss;
      weighted.mtp_weight =
          probe.lm_tokens > 0 && total_mtp > 0
              ? loss.mtp_weight * static_cast<double>(probe.mtp_tokens) *
                    static_cast<double>(total_lm) /
                    (static_cast<double>(total_mtp) * static_cast<double>(probe.lm_tokens))
              : 0.0;
      m.params().zero_grads();
      const LossBreakdown r = m.forward_backward(single(d), weighted, {});
      const double scale =
          static_cast<double>(r.lm_tokens) / static_cast<double>(std::max<int64_t>(total_lm, 1));
      const std::vector<T>& g = m.params().grads();
      for (size_t i = 0; i < g.size(); ++i)
        ref.grads[i] += (indexer_param[i] ? 1.0 : scale) * static_cast<double>(g[i]);
      ref.lm_sum += r.lm * static_cast<double>(r.lm_tokens);
      ref.mtp_sum += probe.mtp * static_cast<double>(probe.mtp_tokens);
      ref.indexer += r.indexer;
      ref.lm_tokens += r.lm_tokens;
      ref.mtp_tokens += probe.mtp_tokens;
      if (ref.expert_load.empty()) ref.expert_load.assign(r.expert_load.size(), {});
      for (int64_t l = 0; l < m.config().num_hidden_layers; ++l) {
        auto& load = ref.expert_load[static_cast<size_t>(l)];
        load.resize(r.expert_load[static_cast<size_t>(l)].size(), 0);
        for (size_t e = 0; e < load.size(); ++e) load[e] += r.expert_load[l][e];
      }
    }
  return ref;
}

TEST(PackingTest, PackedRowsEqualSeparateDocumentsInDouble) {
  Model<double> m(tiny());
  randomize(m, 21);
  const auto rows = make_documents(m.config(), 5);
  LossOptions loss;
  loss.mtp_weight = 0.3;
  loss.indexer_loss = true;
  m.params().zero_grads();
  const LossBreakdown packed = m.forward_backward(packed_batch(rows, true, true), loss, {});
  const std::vector<double> packed_grads = m.params().grads();
  const Reference<double> ref = run_separately(m, rows, loss, packed.lm_tokens, packed.mtp_tokens);

  // 21+1+10+17+6 tokens: targets are t+1 inside a document, minus one masked each
  // in the four documents longer than 5.
  EXPECT_EQ(packed.lm_tokens, 20 + 0 + 9 + 16 + 5 - 4);
  EXPECT_EQ(packed.lm_tokens, ref.lm_tokens);
  EXPECT_EQ(packed.mtp_tokens, ref.mtp_tokens);
  EXPECT_GT(packed.mtp_tokens, 30);
  auto rel = [](double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); };
  EXPECT_LT(rel(packed.lm * packed.lm_tokens, ref.lm_sum), 1e-12);
  EXPECT_LT(rel(packed.mtp * packed.mtp_tokens, ref.mtp_sum), 1e-12);
  EXPECT_GT(ref.indexer, 0.0);
  EXPECT_LT(rel(packed.indexer, ref.indexer), 1e-12);
  const double want_total = ref.lm_sum / static_cast<double>(ref.lm_tokens) +
                            loss.mtp_weight * ref.mtp_sum / static_cast<double>(ref.mtp_tokens) +
                            ref.indexer;
  EXPECT_LT(rel(packed.total, want_total), 1e-12);
  // Routing is token-local: the main layers route exactly the same tokens.
  for (int64_t l = 0; l < m.config().num_hidden_layers; ++l)
    EXPECT_EQ(packed.expert_load[l], ref.expert_load[l]) << "layer " << l;

  int64_t tensors = 0;
  double worst = 0;
  for (const auto& spec : m.params().specs()) {
    const int64_t off = m.params().offset(spec.name);
    double scale = 0, diff = 0;
    for (int64_t i = off; i < off + spec.numel(); ++i) {
      scale = std::max(scale, std::abs(ref.grads[i]));
      diff = std::max(diff, std::abs(packed_grads[i] - ref.grads[i]));
    }
    if (spec.group == trex::model::OptimizerGroup::kNotTrained) {
      EXPECT_EQ(diff, 0.0) << spec.name;
      continue;
    }
    // A routed expert no token chose has none; every other tensor must have one.
    if (spec.name.find(".experts.") == std::string::npos) {
      EXPECT_GT(scale, 0.0) << spec.name << " carries no gradient";
    }
    EXPECT_LE(diff, 1e-12 * scale) << spec.name << ": max |Δ| " << diff << " of " << scale;
    if (scale > 0) ++tensors;
    worst = std::max(worst, scale > 0 ? diff / scale : 0.0);
  }
  EXPECT_GT(tensors, 150);
  std::cout << "packed vs separate: " << tensors << " tensors with gradient, worst max|Δ|/max|g| "
            << worst << "\n";
}

TEST(PackingTest, PackedRowsEqualSeparateDocumentsInFloat) {
  Model<float> m(tiny());
  randomize(m, 22);
  const auto rows = make_documents(m.config(), 6);
  LossOptions loss;
  loss.mtp_weight = 0.3;
  m.params().zero_grads();
  const LossBreakdown packed = m.forward_backward(packed_batch(rows, true, true), loss, {});
  const Reference<float> ref = run_separately(m, rows, loss, packed.lm_tokens, packed.mtp_tokens);
  EXPECT_NEAR(packed.lm, ref.lm_sum / static_cast<double>(ref.lm_tokens), 1e-5);
  EXPECT_NEAR(packed.mtp, ref.mtp_sum / static_cast<double>(ref.mtp_tokens), 1e-5);
}

TEST(PackingTest, DocumentsOrPositionsAloneDefineTheSameSegments) {
  Model<double> m(tiny());
  randomize(m, 23);
  const auto rows = make_documents(m.config(), 7);
  LossOptions loss;
  loss.indexer_loss = true;
  const auto both = m.forward_backward(packed_batch(rows, true, true), loss, {false, false});
  const auto docs = m.forward_backward(packed_batch(rows, false, true), loss, {false, false});
  // Positions alone: a segment starts at every 0, so the lone 1-token document is
  // still its own segment.
  const auto positions = m.forward_backward(packed_batch(rows, true, false), loss, {false, false});
  EXPECT_EQ(both.total, docs.total);
  EXPECT_EQ(both.total, positions.total);
  // Without the fields the row is one sequence: attention and targets cross documents.
  const auto whole = m.forward_backward(packed_batch(rows, false, false), loss, {false, false});
  EXPECT_GT(whole.lm_tokens, both.lm_tokens);
  EXPECT_GT(std::abs(whole.lm - both.lm), 1e-6);
}

TEST(PackingTest, EmptyFieldsAndOneDocumentPerRowKeepTheBatchedPathBitwise) {
  Model<double> m(tiny());
  randomize(m, 24);
  trex::Rng rng(3, {1});
  Batch plain;
  plain.B = 2;
  plain.S = 24;
  for (int64_t i = 0; i < plain.B * plain.S; ++i)
    plain.input_ids.push_back(rng.uniform_int(int64_t{0}, m.config().vocab_size - 1));
  LossOptions loss;
  loss.balance_loss_weight = 0.01;
  m.params().zero_grads();
  const auto want = m.forward_backward(plain, loss, {});
  const std::vector<double> want_grads = m.params().grads();
  Batch fields = plain;
  for (int64_t b = 0; b < plain.B; ++b)
    for (int64_t t = 0; t < plain.S; ++t) {
      fields.position_ids.push_back(t);
      fields.document_ids.push_back(7 + b);
    }
  m.params().zero_grads();
  const auto got = m.forward_backward(fields, loss, {});
  EXPECT_EQ(got.total, want.total);
  EXPECT_EQ(got.lm, want.lm);
  EXPECT_EQ(got.mtp, want.mtp);
  EXPECT_EQ(got.balance, want.balance);
  EXPECT_EQ(got.expert_load, want.expert_load);
  EXPECT_TRUE(m.params().grads() == want_grads);
}

TEST(PackingTest, ResultDoesNotDependOnThreadCount) {
  Model<double> m(tiny());
  randomize(m, 25);
  const auto rows = make_documents(m.config(), 8);
  const Batch batch = packed_batch(rows, true, true);
  LossOptions loss;
  loss.indexer_loss = true;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  m.params().zero_grads();
  const auto one = m.forward_backward(batch, loss, {});
  const std::vector<double> one_grads = m.params().grads();
  omp_set_num_threads(std::max(saved, 3));
  m.params().zero_grads();
  const auto many = m.forward_backward(batch, loss, {});
  omp_set_num_threads(saved);
  EXPECT_EQ(one.total, many.total);
  EXPECT_TRUE(m.params().grads() == one_grads);
}

TEST(PackingTest, FixedSelectionNeedsTheSameSegments) {
  Model<double> m(tiny());
  randomize(m, 26);
  const auto rows = make_documents(m.config(), 9);
  const Batch packed = packed_batch(rows, true, true);
  const auto first = m.forward_backward(packed, {}, {false, false});
  const auto again = m.forward_backward(packed, {}, {false, true});
  EXPECT_EQ(first.total, again.total);
  const Batch whole = packed_batch(rows, false, false);
  EXPECT_THROW(m.forward_backward(whole, {}, {false, true}), trex::Error);
}

void expect_field_error(Model<double>& m, const Batch& batch, const std::string& field,
                        const std::string& where) {
  try {
    m.forward_backward(batch, {}, {false, false});
    ADD_FAILURE() << "no error for " << field << " " << where;
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), field) << e.what();
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
  }
}

TEST(PackingTest, InvalidPackingFieldsAreRejectedWithRowAndToken) {
  Model<double> m(tiny());
  randomize(m, 27);
  const auto rows = make_documents(m.config(), 10);
  const Batch good = packed_batch(rows, true, true);

  Batch short_positions = good;
  short_positions.position_ids.pop_back();
  expect_field_error(m, short_positions, "position_ids", "expected B·S");
  Batch short_documents = good;
  short_documents.document_ids.resize(5);
  expect_field_error(m, short_documents, "document_ids", "expected B·S");

  Batch decreasing = good;  // row 1 token 3 goes back to an earlier document
  decreasing.document_ids[kS + 3] = 0;
  expect_field_error(m, decreasing, "document_ids", "(row 1, token 3)");

  Batch no_restart = good;  // row 0 token 21 starts document 2 but continues the positions
  no_restart.position_ids[21] = 21;
  expect_field_error(m, no_restart, "position_ids", "(row 0, token 21)");

  Batch offset = good;  // positions with an offset are not supported
  for (int64_t t = 0; t < 21; ++t) offset.position_ids[t] = t + 5;
  expect_field_error(m, offset, "position_ids", "(row 0, token 0)");

  Batch positions_only = good;
  positions_only.document_ids.clear();
  positions_only.position_ids[kS + 2] = 7;  // neither a restart nor the next position
  expect_field_error(m, positions_only, "position_ids", "(row 1, token 2)");
}

}  // namespace
