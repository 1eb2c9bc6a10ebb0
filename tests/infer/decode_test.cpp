// Incremental decoding (infer/decoder.hpp, infer/generate.hpp) against the full forward, batching,
// prefill chunks, forks, and the samplers.
#include "trex/infer/decoder.hpp"
#include "trex/infer/generate.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/model/indexer.hpp"
#include "trex/model/model.hpp"

namespace {

using trex::infer::Decoder;
using trex::model::Model;

// Random init with every parameter family non-trivial: larger matrices (so
// attention, routing and the indexer selection are far from uniform) and random
// norms, sinks, APE, mHC base/scale and router biases.
Model<double> random_model(const std::string& config_name, uint64_t seed) {
  Model<double> m(
      trex::model::ModelConfig::load(trex::test::source_dir() + "/configs/models/" + config_name));
  m.init_random(seed);
  trex::Rng rng(seed, {91});
  for (const auto& spec : m.params().specs()) {
    double* v = m.params().value(spec.name);
    const std::string& n = spec.name;
    const bool small =
        n.find("norm.weight") != std::string::npos || n.find("_scale") != std::string::npos ||
        n.find("_base") != std::string::npos || n.find("attn_sink") != std::string::npos ||
        n.find(".ape") != std::string::npos || n.find("gate.bias") != std::string::npos;
    for (int64_t i = 0; i < spec.numel(); ++i)
      v[i] = small ? v[i] + 0.3 * (2 * rng.uniform() - 1) : 5.0 * v[i];
  }
  return m;
}

std::vector<int64_t> random_tokens(int64_t vocab, int64_t n, uint64_t seed) {
  trex::Rng rng(seed, {5});
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = rng.uniform_int(int64_t{0}, vocab - 1);
  return ids;
}

// The decoder scores the indexer's blocks with its own loops, so its top-k and
// the full forward's agree when the only boundary decisions near a tie are
// exact ties (ReLU-zeroed blocks, both sides: lower block index first).
void expect_clear_indexer_boundaries(const trex::model::IndexerSelectionStats& stats,
                                     double min_margin) {
  EXPECT_GT(stats.min_margin, min_margin) << "a near tie at the indexer's top-k boundary";
  EXPECT_EQ(stats.boundary_ties, stats.zero_ties) << "an exact tie between non-zero scores";
  EXPECT_GT(stats.min_zero_block_relu_margin, min_margin) << "a zero block near the ReLU kink";
}

// Logits [S, V] of the full forward of one sequence.
std::vector<double> full_logits(Model<double>& m, const std::vector<int64_t>& ids) {
  trex::model::Batch batch;
  batch.B = 1;
  batch.S = static_cast<int64_t>(ids.size());
  batch.input_ids = ids;
  trex::model::LossOptions loss;
  loss.mtp_weight = 0.0;
  std::vector<double> logits(ids.size() * static_cast<size_t>(m.config().vocab_size));
  trex::model::IndexerSelectionStats stats;
  {
    trex::model::IndexerSelectionProbe probe(stats);
    m.forward_backward(batch, loss, {false, false}, logits.data());
  }
  expect_clear_indexer_boundaries(stats, 1e-9);
  return logits;
}

// Every logit within 1e-10 of the row's largest magnitude; returns the worst ratio.
double expect_rows_close(const double* got, const double* want, int64_t rows, int64_t vocab,
                         const std::string& what) {
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double scale = 0.0, err = 0.0;
    for (int64_t v = 0; v < vocab; ++v) {
      scale = std::max(scale, std::abs(want[r * vocab + v]));
      err = std::max(err, std::abs(got[r * vocab + v] - want[r * vocab + v]));
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(err, 1e-10 * scale) << what << " row " << r;
    worst = std::max(worst, err / scale);
  }
  return worst;
}

class DecodeConfigs : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeConfigs, TokenByTokenEqualsFullForwardAtEveryPosition) {
  Model<double> m = random_model(GetParam(), 11);
  const int64_t V = m.config().vocab_size, S = 41;  // > several 4-/8-/16-blocks and windows
  const auto ids = random_tokens(V, S, 3);
  const auto want = full_logits(m, ids);
  Decoder<double> dec(m);
  const int64_t seq = dec.add_sequence();
  std::vector<double> got(static_cast<size_t>(S * V));
  for (int64_t t = 0; t < S; ++t) dec.feed({seq}, {ids[t]}, got.data() + t * V);
  EXPECT_EQ(dec.length(seq), S);
  const double worst = expect_rows_close(got.data(), want.data(), S, V, "incremental");
  EXPECT_LT(worst, 1e-10);
}

TEST_P(DecodeConfigs, ChunkedPrefillThenTokensEqualsFullForward) {
  Model<double> m = random_model(GetParam(), 12);
  const int64_t V = m.config().vocab_size, S = 37;
  const auto ids = random_tokens(V, S, 4);
  const auto want = full_logits(m, ids);
  Decoder<double> dec(m);
  const int64_t seq = dec.add_sequence();
  std::vector<double> got(static_cast<size_t>(S * V));
  // Chunks of 13 (crossing block and window boundaries), 1, 9, then one at a time.
  int64_t t = 0;
  for (int64_t chunk : {13, 1, 9}) {
    std::vector<int64_t> seqs(static_cast<size_t>(chunk), seq),
        toks(ids.begin() + t, ids.begin() + t + chunk);
    dec.feed(seqs, toks, got.data() + t * V);
    t += chunk;
  }
  for (; t < S; ++t) dec.feed({seq}, {ids[t]}, got.data() + t * V);
  expect_rows_close(got.data(), want.data(), S, V, "chunked");

  // Only the last row's logits of a chunk.
  Decoder<double> dec2(m);
  const int64_t s2 = dec2.add_sequence();
  std::vector<double> last(static_cast<size_t>(V));
  std::vector<int64_t> seqs(static_cast<size_t>(S), s2);
  dec2.feed(seqs, ids, last.data(), {S - 1});
  expect_rows_close(last.data(), want.data() + (S - 1) * V, 1, V, "last row");
}

TEST_P(DecodeConfigs, BatchedSequencesOfDifferentLengthsEqualOneByOne) {
  Model<double> m = random_model(GetParam(), 13);
  const int64_t V = m.config().vocab_size;
  const std::vector<int64_t> lengths = {29, 17, 35};
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<double>> want;
  for (size_t i = 0; i < lengths.size(); ++i) {
    ids.push_back(random_tokens(V, lengths[i], 20 + i));
    want.push_back(full_logits(m, ids.back()));
  }
  // Sequence 0 prefills 6 tokens, sequence 1 starts at step 3, sequence 2 prefills
  // 10 tokens at step 5; each finishes (drops out) at its own length.
  Decoder<double> dec(m);
  std::vector<int64_t> handle(lengths.size(), -1), pos(lengths.size(), 0);
  std::vector<std::vector<double>> got(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) got[i].resize(static_cast<size_t>(lengths[i] * V));
  const std::vector<int64_t> start_step = {0, 3, 5}, prefill = {6, 1, 10};
  for (int64_t step = 0;; ++step) {
    std::vector<int64_t> seqs, toks, owner;
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (step < start_step[i] || pos[i] >= lengths[i]) continue;
      if (handle[i] < 0) handle[i] = dec.add_sequence();
      const int64_t take = step == start_step[i] ? prefill[i] : 1;
      for (int64_t k = 0; k < take; ++k) {
        seqs.push_back(handle[i]);
        toks.push_back(ids[i][pos[i] + k]);
        owner.push_back(static_cast<int64_t>(i));
      }
    }
    if (std::all_of(handle.begin(), handle.end(), [](int64_t h) { return h == -2; })) break;
    ASSERT_LT(step, 100);
    if (seqs.empty()) continue;
    std::vector<double> logits(seqs.size() * static_cast<size_t>(V));
    dec.feed(seqs, toks, logits.data());
    for (size_t r = 0; r < seqs.size(); ++r) {
      const size_t i = static_cast<size_t>(owner[r]);
      std::copy(logits.begin() + static_cast<int64_t>(r) * V,
                logits.begin() + static_cast<int64_t>(r + 1) * V, got[i].begin() + pos[i] * V);
      ++pos[i];
    }
    for (size_t i = 0; i < lengths.size(); ++i)
      if (handle[i] >= 0 && pos[i] == lengths[i]) {
        EXPECT_EQ(dec.length(handle[i]), lengths[i]);
        dec.release_sequence(handle[i]);
        handle[i] = -2;  // finished: drops out of the batch
      }
  }
  EXPECT_EQ(dec.active_sequences(), 0);
  for (size_t i = 0; i < lengths.size(); ++i)
    expect_rows_close(got[i].data(), want[i].data(), lengths[i], V,
                      "batched sequence " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(TinyConfigs, DecodeConfigs,
                         ::testing::Values("tiny-v4.json", "tiny-v4-clamp.json"),
                         [](const auto& info) {
                           return info.param == "tiny-v4.json" ? std::string("TinyV4")
                                                               : std::string("TinyV4Clamp");
                         });

TEST(Decode, ForkedSequencesContinueIndependently) {
  Model<double> m = random_model("tiny-v4.json", 14);
  const int64_t V = m.config().vocab_size;
  const auto prompt = random_tokens(V, 15, 6);
  auto a = prompt, b = prompt;
  for (int64_t k = 0; k < 10; ++k) {
    a.push_back((k * 7 + 1) % V);
    b.push_back((k * 13 + 5) % V);
  }
  const auto want_a = full_logits(m, a), want_b = full_logits(m, b);
  Decoder<double> dec(m);
  const int64_t sa = dec.add_sequence();
  dec.feed(std::vector<int64_t>(prompt.size(), sa), prompt, nullptr);
  const int64_t sb = dec.fork_sequence(sa);
  std::vector<double> logits(static_cast<size_t>(2 * V));
  for (size_t t = prompt.size(); t < a.size(); ++t) {
    dec.feed({sa, sb}, {a[t], b[t]}, logits.data());
    expect_rows_close(logits.data(), want_a.data() + t * V, 1, V, "fork a");
    expect_rows_close(logits.data() + V, want_b.data() + t * V, 1, V, "fork b");
  }
}

TEST(Decode, FloatDecoderMatchesFloatForward) {
  Model<double> md = random_model("tiny-v4.json", 18);
  Model<float> m(md.config());
  for (size_t i = 0; i < md.params().values().size(); ++i)
    m.params().values()[i] = static_cast<float>(md.params().values()[i]);
  m.hash_tables() = md.hash_tables();
  const int64_t V = m.config().vocab_size, S = 30;
  const auto ids = random_tokens(V, S, 8);
  trex::model::Batch batch;
  batch.B = 1;
  batch.S = S;
  batch.input_ids = ids;
  trex::model::LossOptions loss;
  loss.mtp_weight = 0.0;
  std::vector<float> want(static_cast<size_t>(S * V)), got(want.size());
  trex::model::IndexerSelectionStats stats;
  {
    trex::model::IndexerSelectionProbe probe(stats);
    m.forward_backward(batch, loss, {false, false}, want.data());
  }
  expect_clear_indexer_boundaries(stats, 1e-4);
  Decoder<float> dec(m);
  const int64_t s = dec.add_sequence();
  dec.feed(std::vector<int64_t>(6, s), std::vector<int64_t>(ids.begin(), ids.begin() + 6),
           got.data());
  for (int64_t t = 6; t < S; ++t) dec.feed({s}, {ids[t]}, got.data() + t * V);
  for (int64_t r = 0; r < S; ++r) {
    float scale = 0, err = 0;
    for (int64_t v = 0; v < V; ++v) {
      scale = std::max(scale, std::abs(want[r * V + v]));
      err = std::max(err, std::abs(got[r * V + v] - want[r * V + v]));
    }
    EXPECT_LE(err, 1e-4f * scale) << "row " << r;
  }
}

TEST(Decode, RejectsBadInput) {
  Model<double> m = random_model("tiny-v4.json", 15);
  Decoder<double> dec(m);
  const int64_t s = dec.add_sequence();
  EXPECT_THROW(dec.feed({s}, {m.config().vocab_size}, nullptr), trex::Error);
  EXPECT_THROW(dec.feed({s + 1}, {3}, nullptr), trex::Error);
  EXPECT_THROW(dec.feed({s, s}, {3}, nullptr), trex::Error);
  EXPECT_EQ(dec.length(s), 0);
  dec.release_sequence(s);
  EXPECT_THROW(dec.length(s), trex::Error);
}

// Greedy generation: every generated token is the arg max of the full forward's
// logits on the prompt plus the tokens before it; batch size changes nothing.
TEST(Generate, GreedyFollowsFullForwardArgmaxAndIsDeterministic) {
  Model<double> m = random_model("tiny-v4.json", 16);
  const int64_t V = m.config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t p = 0; p < 3; ++p) {
    const auto ids = random_tokens(V, 5 + 4 * p, 30 + p);
    prompts.emplace_back(ids.begin(), ids.end());
  }
  trex::infer::GenerateOptions o;
  o.max_new_tokens = 12;
  o.eos_id = V + 1;  // never
  o.batch_size = 1;
  const auto one = trex::infer::generate_tokens(m, prompts, o);
  o.batch_size = 3;
  const auto batched = trex::infer::generate_tokens(m, prompts, o);
  EXPECT_EQ(one.tokens, batched.tokens);
  EXPECT_EQ(one.generated_tokens, 3 * 12);
  for (size_t p = 0; p < prompts.size(); ++p) {
    ASSERT_EQ(one.tokens[p][0].size(), 12u);
    EXPECT_FALSE(one.stopped_at_eos[p][0]);
    std::vector<int64_t> seq(prompts[p].begin(), prompts[p].end());
    for (int32_t tok : one.tokens[p][0]) seq.push_back(tok);
    const auto logits = full_logits(m, seq);
    for (size_t k = 0; k < one.tokens[p][0].size(); ++k) {
      const double* row = logits.data() + (prompts[p].size() - 1 + k) * V;
      EXPECT_EQ(std::max_element(row, row + V) - row, one.tokens[p][0][k]) << p << " " << k;
    }
  }
  // EOS stops a completion without being part of it.
  o.eos_id = one.tokens[1][0][2];
  const auto stopped = trex::infer::generate_tokens(m, prompts, o);
  EXPECT_TRUE(stopped.stopped_at_eos[1][0]);
  const auto& full = one.tokens[1][0];
  EXPECT_EQ(stopped.tokens[1][0],
            std::vector<int32_t>(full.begin(), std::find(full.begin(), full.end(), o.eos_id)));
}

TEST(Generate, TopPNearZeroEqualsGreedyAndSamplingIsSeeded) {
  Model<double> m = random_model("tiny-v4-clamp.json", 17);
  const int64_t V = m.config().vocab_size;
  std::vector<std::vector<int32_t>> prompts = {{3, 9, 27}, {5, 8, 13, 21, 34}};
  trex::infer::GenerateOptions o;
  o.max_new_tokens = 8;
  o.eos_id = V + 1;
  const auto greedy = trex::infer::generate_tokens(m, prompts, o);
  o.sampling = {1.0, 1e-9};
  o.samples = 2;
  const auto nucleus = trex::infer::generate_tokens(m, prompts, o);
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(nucleus.tokens[p][k], greedy.tokens[p][0]);

  o.sampling = {5.0, 1.0};  // hot: nearly uniform over 512 tokens
  o.samples = 3;
  o.seed = 7;
  const auto s1 = trex::infer::generate_tokens(m, prompts, o);
  o.batch_size = 1;
  const auto s2 = trex::infer::generate_tokens(m, prompts, o);
  EXPECT_EQ(s1.tokens, s2.tokens);  // per (seed, prompt, sample), whatever the batching
  EXPECT_NE(s1.tokens[0][0], s1.tokens[0][1]);
  o.seed = 8;
  const auto s3 = trex::infer::generate_tokens(m, prompts, o);
  EXPECT_NE(s1.tokens, s3.tokens);
}

// The old-policy log-probabilities of the policy-gradient step: what sampling at
// temperature τ records for each generated token (EOS included) is the training
// forward's log p(token) under softmax(logits / τ) of the whole sequence
// (LossOptions::logit_temperature), and the entropy is that row's.
TEST(Generate, RecordedLogProbsAreTheTrainingForwards) {
  Model<double> m = random_model("tiny-v4.json", 18);
  const int64_t V = m.config().vocab_size;
  std::vector<std::vector<int32_t>> prompts = {{3, 9, 27, 4}, {5, 8, 13, 21, 34, 2}};
  trex::infer::GenerateOptions o;
  o.max_new_tokens = 9;
  o.sampling = {0.7, 1.0};
  o.samples = 2;
  o.seed = 3;
  o.record_log_probs = true;
  o.eos_id = 7;
  auto g = trex::infer::generate_tokens(m, prompts, o);
  int64_t checked = 0;
  for (size_t p = 0; p < prompts.size(); ++p)
    for (size_t k = 0; k < 2; ++k) {
      const auto& toks = g.tokens[p][k];
      const bool eos = g.stopped_at_eos[p][k];
      ASSERT_EQ(g.log_probs[p][k].size(), toks.size() + (eos ? 1 : 0));
      ASSERT_EQ(g.entropies[p][k].size(), g.log_probs[p][k].size());
      trex::model::Batch batch;
      batch.input_ids.assign(prompts[p].begin(), prompts[p].end());
      for (int32_t t : toks) batch.input_ids.push_back(t);
      if (eos) batch.input_ids.push_back(o.eos_id);
      batch.B = 1;
      batch.S = static_cast<int64_t>(batch.input_ids.size());
      batch.labels.assign(batch.input_ids.size(), -1);
      for (size_t i = prompts[p].size(); i < batch.input_ids.size(); ++i)
        batch.labels[i] = batch.input_ids[i];
      trex::model::LossOptions loss;
      loss.mtp_weight = 0;
      loss.logit_temperature = 0.7;  // the logits output is then logits / 0.7
      trex::model::StepOptions step;
      step.backward = false;
      std::vector<double> lp;
      step.label_log_probs = &lp;
      std::vector<double> logits(batch.input_ids.size() * static_cast<size_t>(V));
      m.forward_backward(batch, loss, step, logits.data());
      for (size_t i = 0; i < g.log_probs[p][k].size(); ++i) {
        const size_t r = prompts[p].size() + i;
        EXPECT_NEAR(g.log_probs[p][k][i], lp[r], 1e-5) << p << " " << k << " " << i;
        const double* z = logits.data() + (r - 1) * static_cast<size_t>(V);
        double mx = z[0], sum = 0, h = 0;
        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, z[v]);
        for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - mx);
        for (int64_t v = 0; v < V; ++v) {
          const double q = std::exp(z[v] - mx) / sum;
          if (q > 0) h -= q * std::log(q);
        }
        EXPECT_NEAR(g.entropies[p][k][i], h, 1e-5);
        ++checked;
      }
    }
  EXPECT_GE(checked, 20);
}

TEST(Generate, SampleTokenMatchesSoftmaxAndNucleus) {
  // softmax of log(1), log(2), log(4) at T = 1: 1/7, 2/7, 4/7.
  const std::vector<double> logits = {0.0, std::log(2.0), std::log(4.0)};
  trex::Rng rng(3, {1});
  std::vector<int> counts(3, 0);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i)
    ++counts[trex::infer::sample_token(logits.data(), 3, {1.0, 1.0}, rng)];
  EXPECT_NEAR(counts[0] / double(draws), 1.0 / 7, 0.01);
  EXPECT_NEAR(counts[1] / double(draws), 2.0 / 7, 0.01);
  EXPECT_NEAR(counts[2] / double(draws), 4.0 / 7, 0.01);
  // top_p 0.6 > 4/7: the nucleus is {2, 1}, renormalised to 2/3, 1/3.
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < draws; ++i)
    ++counts[trex::infer::sample_token(logits.data(), 3, {1.0, 0.6}, rng)];
  EXPECT_EQ(counts[0], 0);
  EXPECT_NEAR(counts[2] / double(draws), 2.0 / 3, 0.01);
  // Temperature 0.5 squares the ratios: 1/21, 4/21, 16/21.
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < draws; ++i)
    ++counts[trex::infer::sample_token(logits.data(), 3, {0.5, 1.0}, rng)];
  EXPECT_NEAR(counts[2] / double(draws), 16.0 / 21, 0.01);
  // Greedy: lowest id among equal maxima.
  const std::vector<double> tie = {1.0, 3.0, 3.0};
  EXPECT_EQ(trex::infer::sample_token(tie.data(), 3, {0.0, 1.0}, rng), 1);
  EXPECT_THROW(trex::infer::sample_token(tie.data(), 3, {1.0, 0.0}, rng), trex::Error);
  EXPECT_THROW(trex::infer::sample_token(tie.data(), 3, {-1.0, 1.0}, rng), trex::Error);
}

}  // namespace
