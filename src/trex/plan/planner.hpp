#pragma once
// The planner: memory per device, step time and MFU of one parallel layout of
// a model on a cluster (evaluate), and a search over layouts (search). Models
// and defaults are documented in docs/planner.md.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trex/plan/cluster.hpp"
#include "trex/plan/model_shape.hpp"

namespace trex::plan {

enum class Recompute { kNone, kSelective, kFull };
enum class Schedule { k1F1B, kInterleaved, kDualPipe, kDualPipeV };
enum class Optimizer { kAdamW, kMuon };

std::string to_string(Recompute r);
std::string to_string(Schedule s);
std::string to_string(Optimizer o);
Recompute parse_recompute(const std::string& s);
Schedule parse_schedule(const std::string& s);
Optimizer parse_optimizer(const std::string& s);

struct Layout {
  int64_t tp = 1;   // tensor parallel (with sequence parallel), inside the scale-up domain
  int64_t pp = 1;   // pipeline stages (devices)
  int64_t vpp = 1;  // virtual stages per device (interleaved schedule only)
  int64_t ep = 1;   // expert parallel (expert TP = 1; folded over TP×CP×DP)
  int64_t cp = 1;   // context parallel
  int64_t mbs = 1;  // micro-batch size (sequences)
  Recompute recompute = Recompute::kSelective;
  int zero = 1;                    // 0: replicated optimizer; 1: states; 2: + grads; 3: + params
  bool offload_optimizer = false;  // optimizer states swapped to host memory
  Schedule schedule = Schedule::k1F1B;
  // Communication/compute overlap: A2A hidden under the paired micro-batch
  // (F&B), DP grad reduce-scatter/all-gather under the backward/forward, TP/CP
  // comm overlap, PP sends under the next chunk, optimizer swap pipelined.
  bool overlap = true;
  bool ep_overlap = true;      // the F&B A2A overlap itself (needs `overlap` as well)
  bool fused_kernels = true;   // fused non-GEMM kernels (norm/mHC/permute/attention)
  bool topology_aware = true;  // EP/TP placed inside the scale-up domain and collectives use it
  bool fp8 = false;            // FP8 GEMMs (needs device fp8)
  bool fp8_attention = false;  // FP8 attention kernels (efficiency.fp8_attention_speedup)
  // FP8 layouts dispatch the EP all-to-all in FP8 (DeepSeek's DeepEP stack);
  // false: BF16 dispatch with FP8 GEMMs (Megatron's dispatchers).
  bool fp8_dispatch = true;
  // With F&B overlap, the A2A of the pipeline's warm-up/cool-down micro-batches
  // is half hidden under the shared expert (MindSpeed); false: exposed
  // (Megatron, which forbids shared-expert overlap with its EP overlap).
  bool edge_self_overlap = true;
  // The step runs as captured CUDA graphs: no per-kernel launch overhead.
  bool cuda_graphs = false;
  // Load-driven expert migration / hot-expert placement: removes 3/4 of the
  // routing imbalance above 1 (Job::expert_imbalance).
  bool expert_rebalancing = false;

  int64_t dp(int64_t devices) const { return devices / (tp * cp * pp); }
  std::string describe() const;  // "TP2 PP8 VPP4 EP64 CP1 mbs1 ..."
};

// A layout from its text form, comma-separated tokens:
// "tp2,pp8,vpp4,ep64,cp1,mbs1,interleaved,selective,zero1,offload,no-overlap,
// no-ep-overlap,unfused,naive,rebalance,fp8,fp8-attention,cuda-graphs,bf16-dispatch,
// no-edge-overlap" (unnamed fields keep Layout's defaults). Throws trex::Error (field "--layout")
// naming a bad token.
Layout parse_layout(const std::string& text);

struct MemoryEstimate;

struct Job {
  int64_t devices = 0;
  int64_t global_batch = 0;  // sequences per step
  int64_t seq_len = 0;
  Optimizer optimizer = Optimizer::kAdamW;
  double grad_bytes = 4;  // main-gradient buffer element size (fp32 accumulation)
  // Bytes per optimizer moment element: 4 (fp32) or 2 (bf16, as DeepSeek-V3's
  // AdamW moments). The fp32 master copy (4 bytes) is kept either way.
  double moment_bytes = 4;
  // Bytes per master-weight element on the optimizer shard: 4 (fp32 master),
  // or 0 where the optimizer updates the bf16 weights in place (PyTorch Adam
  // on bf16 parameters, as NeMo AutoModel's benchmarks run).
  double master_bytes = 4;
  // Bytes per routed-expert weight held on the device between steps: 2 (bf16),
  // or FP8/FP4 primary weights with their scales (kExpertWeightBytes).
  double expert_weight_bytes = 2;
  // Tokens received by the most loaded EP rank / the average (expert GEMMs and
  // A2A run at the pace of that rank), before any expert rebalancing.
  // 1 = forced-balanced routing.
  double expert_imbalance = 1.1;
  // Share of wall-clock time spent in steady-state training steps (goodput).
  // 1 = steady state: what per-iteration logs and benchmarks report. A figure
  // derived from a whole run's GPU-hours also pays for checkpointing,
  // evaluation, failures and restarts and the batch-size ramp;
  // kEndToEndGoodput is the default for such accounting (docs/planner.md).
  // Throughput, TFLOP/s and MFU are multiplied by it; the step time is not.
  double goodput = 1.0;
  // The engine's own memory accounting of a layout `trex train` runs (the
  // largest rank of `trex model memory`), bound by the caller — the cli binds
  // train::account_state; the plan layer does not depend on the trainer. When
  // it returns a value for a layout with no planner-only feature, evaluate()
  // reports that rank's bytes (plus the device's runtime reserve) instead of
  // its own model, and keeps its model's figure in Estimate::modelled_memory.
  std::function<std::optional<MemoryEstimate>(const Layout&)> engine_memory;

  // A job of `devices` devices, `global_batch` sequences of `seq_len` tokens per
  // step, defaults elsewhere.
  static Job of(int64_t devices, int64_t global_batch, int64_t seq_len) {
    Job j;
    j.devices = devices;
    j.global_batch = global_batch;
    j.seq_len = seq_len;
    return j;
  }
};

// Bytes per routed-expert weight, scales included: bf16; FP8 e4m3 with one
// E8M0 scale per 128x128 block (DeepSeek's release); MXFP8 and MXFP4 with one
// E8M0 scale per 32 values (OCP MX formats, Blackwell).
struct ExpertWeightFormat {
  const char* name;
  double bytes;
};
inline constexpr ExpertWeightFormat kExpertWeightFormats[] = {
    {"bf16", 2.0},
    {"fp8", 1.0 + 1.0 / (128.0 * 128.0)},
    {"mxfp8", 1.0 + 1.0 / 32.0},
    {"mxfp4", 0.5 + 1.0 / 32.0},
};
// Bytes of a format name above; throws trex::Error listing the names.
double expert_weight_bytes(const std::string& format);

// Effective training time of published large runs: Llama 3 405B, 16K H100,
// 54-day snapshot with 466 interruptions: "higher than 90%" (arXiv 2407.21783
// §3.3.4); MegaScale, 12K GPUs: "over 90%" (arXiv 2402.15627).
inline constexpr double kEndToEndGoodput = 0.90;

// Bytes on the most loaded device.
struct MemoryEstimate {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, logits = 0, comm_buffers = 0,
         reserved = 0;
  double capacity = 0;  // HBM bytes
  double total() const {
    return weights + gradients + optimizer + activations + logits + comm_buffers + reserved;
  }
  bool fits() const { return total() <= capacity; }
};

// Seconds per step, on the bottleneck device. The compute terms are summed
// over all micro-batches of the step.
struct TimeEstimate {
  double gemm = 0;                        // dense + routed-expert GEMMs
  double attention = 0;                   // core attention (+ V4 indexer)
  double vector = 0;                      // non-GEMM ops (HBM-bound)
  double launch = 0;                      // kernel launch overheads
  double recompute = 0;                   // re-run forward work
  double a2a_total = 0, a2a_exposed = 0;  // EP dispatch/combine
  double tp_cp_exposed = 0;               // TP (SP) and CP collectives not hidden
  double pp_exposed = 0;                  // PP p2p not hidden
  double overlap_penalty = 0;             // compute slowed by concurrent collectives
  double bubble = 0;                      // pipeline fill/drain
  double dp_total = 0, dp_exposed = 0;    // gradient reduce-scatter + param all-gather
  double optimizer = 0;                   // optimizer update (+ Muon Newton–Schulz)
  double offload_exposed = 0;             // optimizer-state swap not hidden
  double step = 0;
  double compute() const { return gemm + attention + vector + launch + recompute; }
};

struct Estimate {
  Layout layout;
  bool valid = false;
  std::string invalid_reason;  // why the layout cannot run (divisibility, schedule rules)
  int64_t dp = 0;
  int64_t micro_batches = 0;  // per pipeline per step
  MemoryEstimate memory;
  // memory is the engine's accounting (Job::engine_memory); modelled_memory
  // is then the planner's own figure for the same layout.
  bool memory_from_engine = false;
  MemoryEstimate modelled_memory;
  TimeEstimate time;
  double tokens_per_s_per_device = 0;
  double model_tflops_per_device = 0;     // Megatron-Bridge FLOPs / step time
  double hardware_tflops_per_device = 0;  // + recompute FLOPs
  double mfu = 0;                         // model FLOPs / BF16 dense peak
  double goodput = 1;  // Job::goodput applied to the three throughput figures above
};

Estimate evaluate(const ModelShape& model, const ClusterSpec& cluster, const Job& job,
                  const Layout& layout);

struct SearchOptions {
  int64_t top_k = 5;
  bool allow_fp8 = false;
  bool allow_offload = true;
  // Switches the search does not vary (the software stack's capabilities).
  bool fused_kernels = true;
  bool topology_aware = true;
  bool expert_rebalancing = false;
  std::vector<Schedule> schedules = {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kDualPipeV};
  std::vector<bool> overlap = {true, false};
};

struct SearchResult {
  std::vector<Estimate> best;        // fitting layouts, highest MFU first, at most top_k
  std::vector<Estimate> candidates;  // every valid layout evaluated (fits or not)
  int64_t evaluated = 0;
};

SearchResult search(const ModelShape& model, const ClusterSpec& cluster, const Job& job,
                    const SearchOptions& options);

// Contiguous split of `weights` into `parts` near-equal chunks: each chunk
// takes items while that brings it closer to (remaining weight / remaining
// chunks), takes at least one item, and otherwise leaves one item for each
// later chunk. Returns the first index of each chunk (size parts, [0] == 0);
// trailing chunks are empty only when parts > weights.size().
std::vector<size_t> balanced_partition(const std::vector<double>& weights, int64_t parts);

}  // namespace trex::plan
