#pragma once
// Pipeline parallelism (docs/pipeline-parallel.md): the layers are cut into
// contiguous chunks (model::StageSpec) placed on the ranks of the pp
// communicator; every rank runs the forwards and backwards of its chunks in the
// order of a schedule (1F1B or DualPipeV), handing activations forward and
// their gradients back by point-to-point transfers.
//
// A rank holds only its chunks' parameters (chunks_of_rank, model::stages_hold)
// and computes their gradients; the MTP block's tied copy of the embedding on
// the head's rank is the one tensor two stages share.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trex/model/model.hpp"
#include "trex/parallel/communicator.hpp"

namespace trex::parallel {

enum class PipelineSchedule {
  k1F1B,       // one chunk per rank; warm-up forwards, then one forward / one backward
  kDualPipeV,  // two chunks per rank in a V: rank r holds chunks r and 2·pp−1−r
};
const char* pipeline_schedule_name(PipelineSchedule schedule);  // "1f1b", "dualpipev"
// Throws trex::Error (field "pipeline_schedule") on anything else.
PipelineSchedule parse_pipeline_schedule(const std::string& name);

// Balanced contiguous ranges: `parts` [first, last) ranges covering [0, layers);
// the first layers % parts ranges get one layer more (the head's chunk then
// tends to carry fewer layers: it also runs the LM head and the MTP block).
std::vector<std::pair<int64_t, int64_t>> partition_layers(int64_t layers, int parts);

// Actions ahead of the running one whose receives the runner posts, so they
// wait when the neighbour's send arrives; each holds a stage stream (what the
// memory accounting counts).
inline constexpr size_t kPipelineReceiveLookahead = 2;

enum class PipeOp { kForward, kBackward };

struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int micro_batch = 0;
  int chunk = 0;  // in model order: chunk 0 has the embedding, the last the head
  bool operator==(const PipeAction&) const = default;
};

// Who runs what, in which order.
struct PipelinePlan {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int stages = 1;  // pp ranks
  int micro_batches = 0;
  std::vector<model::StageSpec> chunks;           // chunk → layers, embedding, head
  std::vector<int> chunk_rank;                    // chunk → pp rank
  std::vector<std::vector<PipeAction>> programs;  // pp rank → its actions in order
  int num_chunks() const { return static_cast<int>(chunks.size()); }
};

// 1F1B: pp chunks (chunk s on rank s); rank s runs min(pp−s−1, N) warm-up
// forwards, then alternates forward / backward, then drains the backwards.
// DualPipeV (anchors §5.5, with full backwards, i.e. no deferred weight
// gradients): 2·pp chunks, N ≥ 2·pp. Throws trex::Error (field "pipeline") on
// pp < 1, N < 1, N < 2·pp for DualPipeV, or fewer layers than chunks.
//
// `layers_per_chunk` (one count per chunk, in model order, summing to
// num_layers; zeros allowed) replaces the balanced split, e.g. to give the
// head's chunk, which also runs the LM head and the MTP block, fewer layers
// (as Megatron's first/last-stage layer counts). Empty: partition_layers.
PipelinePlan make_pipeline_plan(PipelineSchedule schedule, int stages, int micro_batches,
                                int64_t num_layers, std::span<const int64_t> layers_per_chunk = {});

// The chunks (model order) pp rank `rank` runs under `schedule`, whatever the
// number of micro-batches: the layers whose parameters, gradients and
// optimizer state that rank holds.
std::vector<model::StageSpec> chunks_of_rank(PipelineSchedule schedule, int stages,
                                             int64_t num_layers, int rank,
                                             std::span<const int64_t> layers_per_chunk = {});

// The plan run on an idealised machine: a forward costs `forward_cost`, a
// backward `backward_cost`, transfers are free; every action starts when its
// rank is free and its inputs exist. Throws trex::Error (field "pipeline") when
// the programs are not a valid schedule: an action missing, duplicated or on
// the wrong rank, or a deadlock (an input that is never produced before it is
// needed).
struct TimedAction {
  PipeAction action;
  double start = 0.0, end = 0.0;
};
struct ScheduleTimeline {
  std::vector<std::vector<TimedAction>> ranks;  // in program order
  double makespan = 0.0;
  std::vector<double> bubble_fraction;  // per rank: idle / makespan
};
ScheduleTimeline simulate_schedule(const PipelinePlan& plan, double forward_cost = 1.0,
                                   double backward_cost = 2.0);

// ASCII timeline of the simulated plan (forward 1 slot, backward 2 slots), one
// row per rank, with the ideal bubble fractions.
std::string describe_schedule(const PipelinePlan& plan);

struct PipelineResult {
  // Token-weighted sums over the micro-batches (divide by the token counts for
  // the means), and per-micro-batch breakdowns (lm, mtp, balance, indexer,
  // token counts, expert loads of every block). Valid on every rank.
  double lm_sum = 0.0;   // Σ_i lm_i · lm_tokens_i
  double mtp_sum = 0.0;  // Σ_i mtp_i · mtp_tokens_i
  int64_t lm_tokens = 0;
  int64_t mtp_tokens = 0;
  double balance_sum = 0.0;                       // Σ_i balance_i
  double indexer_sum = 0.0;                       // Σ_i indexer_i
  std::vector<std::vector<int64_t>> expert_load;  // summed over micro-batches, per block
  std::vector<model::LossBreakdown> micro_batches;
  // Measured on each rank (gathered: index = pp rank): time outside
  // forward_stage / backward_stage over the wall time of the schedule.
  std::vector<double> bubble_fraction;
  std::vector<double> busy_seconds;
  double step_seconds = 0.0;  // this rank's wall time of the schedule
};

// T = float for training; double for exact-arithmetic checks.
template <class T>
class BasicPipelineRunner {
 public:
  // `pp` is the pipeline communicator (ProcessGrid::pp()); its size is the
  // number of stages. Every rank of it must construct the runner alike.
  // `layers_per_chunk` as in make_pipeline_plan (empty: balanced).
  BasicPipelineRunner(model::Model<T>& model, Communicator& pp, PipelineSchedule schedule,
                      std::vector<int64_t> layers_per_chunk = {});

  // Runs every forward and backward of the micro-batches (the same list on
  // every rank) in schedule order. Gradients accumulate into
  // model.params().grads() (zero them before) as Σ_i n_i · ∇(mean loss of
  // micro-batch i), n_i = its LM targets (model.count_lm_targets): the caller
  // divides by Σ n_i after summing over the pp group (and the data group).
  // Collective over pp.
  // `step` is passed to every forward_stage (its `backward` must stay true).
  PipelineResult run(std::span<const model::Batch> micro_batches, const model::LossOptions& loss,
                     const model::StepOptions& step = {});

  // Forward only (validation): `batch` through every chunk in model order, no
  // backward (step.backward must be false). The breakdown's lm, mtp and token
  // counts are valid on every rank. Collective over pp.
  model::LossBreakdown forward_only(const model::Batch& batch, const model::LossOptions& loss,
                                    const model::StepOptions& step);

  const PipelinePlan& plan(int micro_batches);
  std::string describe_schedule(int micro_batches) {
    return parallel::describe_schedule(plan(micro_batches));
  }

 private:
  model::Model<T>& model_;
  Communicator& pp_;
  PipelineSchedule schedule_;
  std::vector<int64_t> layers_per_chunk_;
  PipelinePlan plan_;
};

using PipelineRunner = BasicPipelineRunner<float>;

}  // namespace trex::parallel
