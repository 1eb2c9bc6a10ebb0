// Pipeline schedules (docs/pipeline-parallel.md): 1F1B and DualPipeV plans
// are valid schedules (every forward and backward of every (micro-batch,
// chunk) exactly once, on the chunk's rank, dependencies respected, no
// deadlock), with the known bubble of 1F1B; the runner on one rank (all chunks
// local) equals forward_backward.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "../train/pipeline_fixtures.hpp"
#include "trex/core/error.hpp"
#include "trex/parallel/communicator.hpp"
#include "trex/parallel/pipeline.hpp"

namespace {

using trex::parallel::make_pipeline_plan;
using trex::parallel::PipeAction;
using trex::parallel::PipelinePlan;
using trex::parallel::PipelineSchedule;
using trex::parallel::PipeOp;
using trex::parallel::ScheduleTimeline;
using trex::parallel::simulate_schedule;

// Checks the invariants directly on the programs and the simulated timeline,
// independently of simulate_schedule's own validation.
void expect_valid(const PipelinePlan& plan, const ScheduleTimeline& tl) {
  const int N = plan.micro_batches, C = plan.num_chunks();
  std::map<std::tuple<int, int, int>, std::pair<double, double>> when;  // (op, m, c) → [start, end)
  for (int r = 0; r < plan.stages; ++r) {
    ASSERT_EQ(tl.ranks[r].size(), plan.programs[r].size());
    double previous_end = 0.0;
    for (size_t i = 0; i < tl.ranks[r].size(); ++i) {
      const auto& ta = tl.ranks[r][i];
      EXPECT_EQ(ta.action, plan.programs[r][i]);  // program order kept
      EXPECT_GE(ta.start, previous_end);          // one action at a time per rank
      previous_end = ta.end;
      EXPECT_EQ(plan.chunk_rank[ta.action.chunk], r);
      const auto key =
          std::make_tuple(static_cast<int>(ta.action.op), ta.action.micro_batch, ta.action.chunk);
      EXPECT_EQ(when.count(key), 0u) << "duplicate action";
      when[key] = {ta.start, ta.end};
    }
  }
  ASSERT_EQ(when.size(), static_cast<size_t>(2 * N * C));
  const int F = static_cast<int>(PipeOp::kForward), B = static_cast<int>(PipeOp::kBackward);
  for (int m = 0; m < N; ++m)
    for (int c = 0; c < C; ++c) {
      const auto f = when.at({F, m, c}), b = when.at({B, m, c});
      EXPECT_LE(f.second, b.first);  // forward before its backward
      if (c > 0) {
        EXPECT_LE(when.at({F, m, c - 1}).second, f.first);
      }
      if (c + 1 < C) {
        EXPECT_LE(when.at({B, m, c + 1}).second, b.first);
      }
    }
}

TEST(PipelineSchedule, OneFOneBIsValidWithTheKnownBubble) {
  for (int pp : {1, 2, 4})
    for (int N = 4; N <= 8; ++N) {
      SCOPED_TRACE("pp=" + std::to_string(pp) + " N=" + std::to_string(N));
      const PipelinePlan plan = make_pipeline_plan(PipelineSchedule::k1F1B, pp, N, 8);
      ASSERT_EQ(plan.num_chunks(), pp);
      EXPECT_TRUE(plan.chunks.front().has_embedding);
      EXPECT_TRUE(plan.chunks.back().has_head);
      const ScheduleTimeline tl = simulate_schedule(plan, 1.0, 2.0);
      expect_valid(plan, tl);
      // (N + pp − 1)·(F + B): every rank idles (pp − 1)·(F + B).
      EXPECT_DOUBLE_EQ(tl.makespan, 3.0 * (N + pp - 1));
      for (int r = 0; r < pp; ++r) {
        EXPECT_NEAR(tl.bubble_fraction[r], (pp - 1.0) / (N + pp - 1.0), 1e-12);
        // At most pp − r micro-batches in flight on rank r (the 1F1B memory bound).
        int in_flight = 0, peak = 0;
        for (const PipeAction& a : plan.programs[r]) {
          in_flight += a.op == PipeOp::kForward ? 1 : -1;
          peak = std::max(peak, in_flight);
        }
        EXPECT_EQ(peak, std::min(pp - r, N));
      }
    }
}

TEST(PipelineSchedule, DualPipeVIsValidAndPlacesTheVOnTheRanks) {
  for (int pp : {2, 4})
    for (int N = 2 * pp; N <= std::max(8, 2 * pp + 2); ++N) {
      SCOPED_TRACE("pp=" + std::to_string(pp) + " N=" + std::to_string(N));
      const PipelinePlan plan = make_pipeline_plan(PipelineSchedule::kDualPipeV, pp, N, 8);
      ASSERT_EQ(plan.num_chunks(), 2 * pp);
      // Rank r holds chunks r and 2·pp−1−r: the embedding and the head both on rank 0.
      for (int c = 0; c < 2 * pp; ++c) EXPECT_EQ(plan.chunk_rank[c], c < pp ? c : 2 * pp - 1 - c);
      EXPECT_TRUE(plan.chunks.front().has_embedding);
      EXPECT_TRUE(plan.chunks.back().has_head);
      EXPECT_EQ(plan.chunk_rank.back(), 0);
      int64_t covered = 0;
      for (const auto& spec : plan.chunks) {
        EXPECT_EQ(spec.first_layer, covered);
        EXPECT_EQ(spec.last_layer - spec.first_layer, 8 / (2 * pp));
        covered = spec.last_layer;
      }
      EXPECT_EQ(covered, 8);
      const ScheduleTimeline tl = simulate_schedule(plan, 1.0, 2.0);
      expect_valid(plan, tl);
      // Both chunks of each rank take their micro-batches in order (FIFO).
      for (int r = 0; r < pp; ++r) {
        std::map<std::pair<int, int>, int> next;  // (op, chunk) → expected micro-batch
        for (const PipeAction& a : plan.programs[r]) {
          const std::pair<int, int> key{static_cast<int>(a.op), a.chunk};
          EXPECT_EQ(a.micro_batch, next[key]++);
        }
      }
      // The same work as 1F1B over pp stages (a chunk is half a stage) finishes
      // earlier: the V fills the pipeline from both ends.
      const ScheduleTimeline half = simulate_schedule(plan, 0.5, 1.0);
      const ScheduleTimeline one_f_one_b =
          simulate_schedule(make_pipeline_plan(PipelineSchedule::k1F1B, pp, N, 8), 1.0, 2.0);
      EXPECT_LT(half.makespan, one_f_one_b.makespan);
      for (int r = 0; r < pp; ++r)
        EXPECT_LT(half.bubble_fraction[r], one_f_one_b.bubble_fraction[r]);
    }
}

TEST(PipelineSchedule, DualPipeVProgramFollowsTheReferenceShape) {
  // pp = 4, N = 10 (anchors §5.5 worked example), with "B* W" as one B and W
  // dropped: rank 3 starts F0 f0 F1 f1 …, rank 0 runs 7 warm-up forwards.
  const PipelinePlan plan = make_pipeline_plan(PipelineSchedule::kDualPipeV, 4, 10, 8);
  auto code = [&](int r) {
    std::string s;
    for (const PipeAction& a : plan.programs[r]) {
      s += a.op == PipeOp::kForward ? 'F' : 'B';
      s += a.chunk == r ? '0' : '1';
      s += ' ';
    }
    return s;
  };
  EXPECT_EQ(code(0).substr(0, 3 * 11), "F0 F0 F0 F0 F0 F0 F0 F1 B1 F1 B1 ");
  EXPECT_EQ(code(3).substr(0, 3 * 12), "F0 F1 F0 F1 F0 F1 F0 F1 F0 B1 F1 B0 ");
  // Rank 1 in full: the §5.5 line "F0×5 F1 F0 F1 B1* W F1 B1* W F1 (F0&B1 F1&B0)×4
  // B1 F1&B0 B1 F1&B0 B1 B0 B1* B0* W B0* W B0* W W" with B* W → B, W dropped.
  std::string main_phase;
  for (int i = 0; i < 4; ++i) main_phase += "F0 B1 F1 B0 ";
  EXPECT_EQ(code(1), "F0 F0 F0 F0 F0 F1 F0 F1 B1 F1 B1 F1 " + main_phase +
                         "B1 F1 B0 B1 F1 B0 B1 B0 B1 B0 B0 B0 ");
  for (int r = 0; r < 4; ++r) {
    std::map<std::string, int> counts;
    for (const PipeAction& a : plan.programs[r])
      ++counts[std::string(a.op == PipeOp::kForward ? "F" : "B") + (a.chunk == r ? "0" : "1")];
    EXPECT_EQ(counts, (std::map<std::string, int>{{"B0", 10}, {"B1", 10}, {"F0", 10}, {"F1", 10}}));
  }
}

TEST(PipelineSchedule, BadPlansAreErrors) {
  auto expect_pipeline_error = [](auto&& f, const std::string& fragment) {
    try {
      f();
      FAIL() << "accepted";
    } catch (const trex::Error& e) {
      EXPECT_EQ(e.field_name(), "pipeline");
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_pipeline_error([] { make_pipeline_plan(PipelineSchedule::kDualPipeV, 4, 7, 8); },
                        "at least 2·pp");
  expect_pipeline_error([] { make_pipeline_plan(PipelineSchedule::kDualPipeV, 4, 8, 4); },
                        "only 4 layers");
  expect_pipeline_error([] { make_pipeline_plan(PipelineSchedule::k1F1B, 0, 8, 4); }, "pp");
  // A backward moved before its forward: the simulated ranks wait forever.
  PipelinePlan swapped = make_pipeline_plan(PipelineSchedule::k1F1B, 2, 4, 8);
  std::swap(swapped.programs[1][0], swapped.programs[1][1]);
  expect_pipeline_error([&] { simulate_schedule(swapped); }, "deadlock");
  // Two ranks each waiting for the other.
  PipelinePlan crossed = make_pipeline_plan(PipelineSchedule::k1F1B, 2, 4, 8);
  std::swap(crossed.programs[0][0], crossed.programs[0][2]);  // rank 0: B0 needs F1 first
  expect_pipeline_error([&] { simulate_schedule(crossed); }, "deadlock");
  PipelinePlan duplicated = make_pipeline_plan(PipelineSchedule::k1F1B, 2, 4, 8);
  duplicated.programs[0][1] = duplicated.programs[0][0];
  expect_pipeline_error([&] { simulate_schedule(duplicated); }, "runs 2 times");
  EXPECT_THROW(trex::parallel::parse_pipeline_schedule("gpipe"), trex::Error);
  EXPECT_EQ(trex::parallel::parse_pipeline_schedule("DualPipeV"), PipelineSchedule::kDualPipeV);
}

TEST(PipelineSchedule, ExplicitLayerCountsCutTheChunks) {
  const std::vector<int64_t> layers = {3, 3, 2, 0};
  const PipelinePlan plan = make_pipeline_plan(PipelineSchedule::k1F1B, 4, 8, 8, layers);
  ASSERT_EQ(plan.num_chunks(), 4);
  EXPECT_EQ(plan.chunks[0], (trex::model::StageSpec{0, 3, true, false}));
  EXPECT_EQ(plan.chunks[2], (trex::model::StageSpec{6, 8, false, false}));
  EXPECT_EQ(plan.chunks[3], (trex::model::StageSpec{8, 8, false, true}));  // the head alone
  EXPECT_NO_THROW(simulate_schedule(plan));
  // DualPipeV: rank 1 runs chunks 1 and 2·pp − 2 = 2 of [1, 1, 1, 1].
  const std::vector<int64_t> dual = {1, 1, 1, 1};
  const std::vector<trex::model::StageSpec> rank1 =
      trex::parallel::chunks_of_rank(PipelineSchedule::kDualPipeV, 2, 4, 1, dual);
  ASSERT_EQ(rank1.size(), 2u);
  EXPECT_EQ(rank1[0], (trex::model::StageSpec{1, 2, false, false}));
  EXPECT_EQ(rank1[1], (trex::model::StageSpec{2, 3, false, false}));
  auto expect_layers_error = [](std::vector<int64_t> counts, const std::string& fragment) {
    try {
      make_pipeline_plan(PipelineSchedule::k1F1B, 4, 8, 8, counts);
      FAIL() << "accepted";
    } catch (const trex::Error& e) {
      EXPECT_EQ(e.field_name(), "parallel.pipeline_layers");
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_layers_error({4, 4}, "lists 2");
  expect_layers_error({3, 3, 3, 0}, "sums to 9");
  expect_layers_error({5, 4, -1, 0}, "cannot have -1");
}

TEST(PipelineSchedule, DescribeDrawsTheTimeline) {
  const PipelinePlan plan = make_pipeline_plan(PipelineSchedule::k1F1B, 4, 8, 8);
  const std::string text = trex::parallel::describe_schedule(plan);
  std::cout << text
            << trex::parallel::describe_schedule(
                   make_pipeline_plan(PipelineSchedule::kDualPipeV, 4, 8, 8));
  std::cout << trex::parallel::describe_schedule(
      make_pipeline_plan(PipelineSchedule::kDualPipeV, 2, 6, 8));
  // Rank 3 (last stage) starts at column 3 and alternates F/B without a gap.
  EXPECT_NE(text.find("rank 3 |  .  .  . F0 B0 B0 F1 B1 B1 F2 B2 B2"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0 | F0 F1 F2 F3"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0 0.273"), std::string::npos) << text;  // 3 / 11
}

// pp = 1: every chunk on this rank (DualPipeV's two chunks hand over locally);
// the runner equals the per-micro-batch forward_backward weighted by n_i. In
// double every tensor agrees to rounding. In float the whole gradient agrees
// within 1e-5 (L2 and max norm); single tensors whose gradient is a sum with
// heavy cancellation (hc_head_scale) differ by up to ~1e-3 of their own size
// there — as much as the fp32 forward_backward differs from the double one —
// so they are not checked one by one (tensor_tolerance 0).
template <class T>
void expect_one_rank_runner_matches(double tensor_tolerance, double global_tolerance) {
  for (const PipelineSchedule schedule : {PipelineSchedule::k1F1B, PipelineSchedule::kDualPipeV}) {
    SCOPED_TRACE(trex::parallel::pipeline_schedule_name(schedule));
    trex::model::Model<T> m = trex::test::pipeline_model<T>();
    const auto batches = trex::test::pipeline_micro_batches(m.config(), 4);
    const trex::model::LossOptions loss = trex::test::pipeline_loss_options();
    const auto want = trex::test::reference_step(m, batches, loss);
    const auto self = trex::parallel::make_self_communicator("pp");
    trex::parallel::BasicPipelineRunner<T> runner(m, *self, schedule);
    m.params().zero_grads();
    const trex::parallel::PipelineResult got = runner.run(batches, loss);
    ASSERT_EQ(got.micro_batches.size(), batches.size());
    double lm_sum = 0.0;
    int64_t lm_tokens = 0;
    for (size_t i = 0; i < batches.size(); ++i) {
      const auto& g = got.micro_batches[i];
      const auto& w = want.losses[i];
      EXPECT_NEAR(g.lm, w.lm, 1e-6 * w.lm);
      EXPECT_NEAR(g.mtp, w.mtp, 1e-6 * w.mtp);
      EXPECT_NEAR(g.balance, w.balance, 1e-6 * w.balance);
      EXPECT_EQ(g.lm_tokens, w.lm_tokens);
      EXPECT_EQ(g.mtp_tokens, w.mtp_tokens);
      EXPECT_EQ(g.expert_load, w.expert_load);
      lm_sum += w.lm * static_cast<double>(w.lm_tokens);
      lm_tokens += w.lm_tokens;
    }
    EXPECT_EQ(got.lm_tokens, lm_tokens);
    EXPECT_NEAR(got.lm_sum, lm_sum, 1e-6 * lm_sum);
    const trex::test::GradientComparison cmp = trex::test::compare_gradients(
        m.params(), std::vector(m.params().grads().begin(), m.params().grads().end()),
        want.weighted_grads);
    EXPECT_LE(cmp.global, global_tolerance);
    EXPECT_LE(cmp.global_max, global_tolerance);
    if (tensor_tolerance > 0) {
      EXPECT_LE(cmp.worst_tensor, tensor_tolerance) << cmp.worst_name;
    }
    ASSERT_EQ(got.bubble_fraction.size(), 1u);
    EXPECT_GE(got.bubble_fraction[0], 0.0);
    EXPECT_LT(got.bubble_fraction[0], 0.5);  // one rank: only the bookkeeping between chunks
  }
}

// A failing stage surfaces as trex::Error (here: fixed selections without a
// previous forward), and bad micro-batches are rejected before any transfer.
TEST(PipelineRunner, ErrorsPropagate) {
  trex::model::Model<float> m = trex::test::pipeline_model<float>();
  auto batches = trex::test::pipeline_micro_batches(m.config(), 4);
  const auto self = trex::parallel::make_self_communicator("pp");
  trex::parallel::PipelineRunner runner(m, *self, PipelineSchedule::kDualPipeV);
  trex::model::StepOptions fixed;
  fixed.fixed_selection = true;
  EXPECT_THROW(runner.run(batches, trex::test::pipeline_loss_options(), fixed), trex::Error);
  trex::model::StepOptions forward_only;
  forward_only.backward = false;
  EXPECT_THROW(runner.run(batches, trex::test::pipeline_loss_options(), forward_only), trex::Error);
  batches[2].labels.pop_back();
  try {
    runner.run(batches, trex::test::pipeline_loss_options());
    FAIL() << "bad micro-batch accepted";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "labels");
  }
  EXPECT_THROW(runner.run(std::span(batches).first(1), trex::test::pipeline_loss_options()),
               trex::Error);  // DualPipeV needs 2·pp micro-batches
}

TEST(PipelineRunner, OneRankMatchesForwardBackwardInDouble) {
  expect_one_rank_runner_matches<double>(1e-10, 1e-12);
}

TEST(PipelineRunner, OneRankMatchesForwardBackwardInFloat) {
  expect_one_rank_runner_matches<float>(0.0, 1e-5);  // per tensor: see above
}

}  // namespace
