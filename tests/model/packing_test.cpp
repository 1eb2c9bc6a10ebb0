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
#include <utility>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/model/model.hpp"
#include "trex/model/moe.hpp"

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

std::vector<std::vector<Document>> make_documents(
    const ModelConfig& c, uint64_t seed,
    const std::vector<std::vector<int64_t>>& row_lengths = kRowLengths) {
  trex::Rng rng(seed, {11});
  std::vector<std::vector<Document>> rows;
  for (size_t b = 0; b < row_lengths.size(); ++b) {
    std::vector<Document> docs;
    for (size_t k = 0; k < row_lengths[b].size(); ++k) {
      const bool padding = b == 1 && k + 1 == row_lengths[b].size();
      Document d;
      for (int64_t t = 0; t < row_lengths[b][k]; ++t) {
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

// Balance loss (spec §3.3) per document: the packed value is the mean over the
// documents of their own balance losses, in every main layer and in the MTP block
// (every document here has ≥ 2 tokens, so each owns MTP positions too). Each
// document runs twice, with α = 0 and α > 0: the difference is its balance
// gradient, weighted 1/D in the packed batch.
TEST(PackingTest, BalanceLossIsPerDocument) {
  Model<double> m(tiny());
  randomize(m, 28);
  const auto rows = make_documents(m.config(), 12, {{21, 2, 9}, {17, 6, 9}});
  LossOptions loss;
  loss.mtp_weight = 0.3;
  loss.balance_loss_weight = 0.05;
  loss.balance_loss_on_hash_layers = true;
  m.params().zero_grads();
  const LossBreakdown packed = m.forward_backward(packed_batch(rows, true, true), loss, {});
  const std::vector<double> packed_grads = m.params().grads();

  const double T = static_cast<double>(packed.lm_tokens),
               M = static_cast<double>(packed.mtp_tokens);
  const double D = 6;
  std::vector<double> want(packed_grads.size(), 0.0);
  double balance = 0, lm_sum = 0;
  for (const auto& docs : rows)
    for (const Document& d : docs) {
      LossOptions probe_options = loss;
      probe_options.mtp_weight = 1.0;
      const LossBreakdown probe = m.forward_backward(single(d), probe_options, {false, false});
      LossOptions lm_only = loss;
      // A document without MTP targets still runs its MTP block (for its balance loss).
      lm_only.mtp_weight = probe.mtp_tokens > 0
                               ? loss.mtp_weight * static_cast<double>(probe.mtp_tokens) * T /
                                     (M * static_cast<double>(probe.lm_tokens))
                               : 1.0;
      lm_only.balance_loss_weight = 0.0;
      LossOptions with_balance = lm_only;
      with_balance.balance_loss_weight = loss.balance_loss_weight;
      m.params().zero_grads();
      const LossBreakdown r0 = m.forward_backward(single(d), lm_only, {});
      const std::vector<double> g0 = m.params().grads();
      m.params().zero_grads();
      const LossBreakdown r1 = m.forward_backward(single(d), with_balance, {});
      const std::vector<double>& g1 = m.params().grads();
      const double scale = static_cast<double>(r0.lm_tokens) / T;
      for (size_t i = 0; i < want.size(); ++i) want[i] += scale * g0[i] + (g1[i] - g0[i]) / D;
      EXPECT_GT(r1.balance, 0.0);
      balance += r1.balance / D;
      lm_sum += r0.lm * static_cast<double>(r0.lm_tokens);
    }
  EXPECT_NEAR(packed.balance, balance, 1e-12 * balance);
  EXPECT_NEAR(packed.lm * T, lm_sum, 1e-12 * lm_sum);
  double worst = 0;
  for (const auto& spec : m.params().specs()) {
    const int64_t off = m.params().offset(spec.name);
    double scale = 0, diff = 0;
    for (int64_t i = off; i < off + spec.numel(); ++i) {
      scale = std::max(scale, std::abs(want[i]));
      diff = std::max(diff, std::abs(packed_grads[i] - want[i]));
    }
    EXPECT_LE(diff, 1e-11 * scale) << spec.name << ": max |Δ| " << diff << " of " << scale;
    if (scale > 0) worst = std::max(worst, diff / scale);
  }
  std::cout << "per-document balance: worst max|Δ|/max|g| " << worst << "\n";
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

// MoE level: listed balance sequences. Rows as sequences reproduce the default
// bitwise; two uneven sequences give the mean of their balance losses run alone;
// overlapping or out-of-range ones are rejected.
struct MoeProblem {
  trex::model::MoeDims dims;
  std::vector<double> gate, x, shared_w1, shared_w2, shared_w3;
  std::vector<std::vector<double>> w1, w2, w3;

  MoeProblem() {
    dims.batch = 1;
    dims.seq = 7;
    dims.hidden = 4;
    dims.n_experts = 4;
    dims.top_k = 2;
    dims.inter = 3;
    dims.balance_loss_weight = 0.1;
    trex::Rng rng(4, {2});
    auto fill = [&](int64_t n) {
      std::vector<double> v(static_cast<size_t>(n));
      for (double& e : v) e = rng.normal();
      return v;
    };
    gate = fill(4 * 4);
    x = fill(7 * 4);
    for (int e = 0; e < 4; ++e) {
      w1.push_back(fill(3 * 4));
      w2.push_back(fill(4 * 3));
      w3.push_back(fill(3 * 4));
    }
  }
  trex::model::MoeWeights<double> weights() const {
    trex::model::MoeWeights<double> w;
    w.gate = gate.data();
    for (int e = 0; e < 4; ++e) {
      w.w1.push_back(w1[e].data());
      w.w2.push_back(w2[e].data());
      w.w3.push_back(w3[e].data());
    }
    return w;
  }
  // Balance loss and router-weight gradient of rows [row, row + dims.tokens()).
  std::pair<double, std::vector<double>> run(const trex::model::MoeDims& d, int64_t row = 0) const {
    trex::model::MoeCache<double> cache;
    std::vector<double> y(static_cast<size_t>(d.tokens() * 4)), dy(y.size(), 0.0);
    trex::model::moe_forward(d, weights(), x.data() + row * 4, nullptr, cache, y.data());
    std::vector<double> dgate(gate.size(), 0.0);
    trex::model::MoeGrads<double> g;
    g.gate = dgate.data();
    trex::model::moe_backward<double>(d, weights(), cache, dy.data(), 1.0, g, nullptr);
    return {cache.balance_loss, dgate};
  }
};

TEST(PackingTest, MoeBalanceSequences) {
  MoeProblem p;
  trex::model::MoeDims rows = p.dims;
  rows.batch = 1;
  rows.seq = 7;
  trex::model::MoeDims listed = rows;
  listed.balance_sequences = {{0, 7}};
  EXPECT_EQ(p.run(rows), p.run(listed));

  // Sequences [0, 3) and [3, 7): the mean of the two run alone.
  trex::model::MoeDims split = rows;
  split.balance_sequences = {{0, 3}, {3, 4}};
  trex::model::MoeDims first = rows, second = rows;
  first.seq = 3;
  second.seq = 4;
  const auto whole = p.run(split), a = p.run(first, 0), b = p.run(second, 3);
  EXPECT_NEAR(whole.first, (a.first + b.first) / 2, 1e-15);
  EXPECT_GT(std::abs(whole.first - p.run(rows).first), 1e-6);
  for (size_t i = 0; i < whole.second.size(); ++i)
    EXPECT_NEAR(whole.second[i], (a.second[i] + b.second[i]) / 2, 1e-14);
  // A token in no sequence takes no part: [0, 3) alone equals `first`.
  trex::model::MoeDims partial = rows;
  partial.balance_sequences = {{0, 3}};
  EXPECT_NEAR(p.run(partial).first, a.first, 1e-15);

  for (const std::vector<trex::model::MoeSequence>& bad :
       {std::vector<trex::model::MoeSequence>{{0, 4}, {3, 4}},
        std::vector<trex::model::MoeSequence>{{5, 3}},
        std::vector<trex::model::MoeSequence>{{2, 0}}}) {
    trex::model::MoeDims d = rows;
    d.balance_sequences = bad;
    try {
      p.run(d);
      ADD_FAILURE() << "accepted bad balance sequences";
    } catch (const trex::Error& e) {
      EXPECT_EQ(e.field_name(), "moe.balance_sequences") << e.what();
    }
  }
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
