#pragma once
// A lightweight per-operation profiler for `trex bench step --profile`.
//
// Call sites open an RAII `Scope` keyed by an `Op`; when profiling is enabled
// the scope adds its wall time to a process-wide counter for (op, phase). Time
// is *exclusive*: a scope's nested scopes subtract their time from it, so the
// counters never double count and their sum is at most the profiled wall time.
// Scopes record only outside active OpenMP parallel regions (the engine opens
// its regions inside the instrumented operations), so the time is wall time of
// the calling thread. Disabled (the default), a scope costs one relaxed load
// and a branch.
#include <atomic>
#include <cstdint>
#include <vector>

namespace trex::profile {

enum class Op : uint8_t {
  kEmbedding,
  // GEMMs by role (the GEMM calls only; GFLOP/s is reported for them).
  kGemmAttnProj,    // attention q/kv/output projections (wq_a, wq_b, wkv, wo_a, wo_b)
  kGemmCompressor,  // KV compressor projections (wkv, wgate) of CSA/HCA and the indexer's
  kGemmIndexer,     // indexer wq_b and weights_proj
  kGemmRouter,      // MoE router logits (fp32)
  kGemmExpert,      // routed expert w1/w3/w2
  kGemmShared,      // shared expert w1/w3/w2
  kGemmMtpProj,     // MTP e_proj / h_proj
  kGemmLmHead,      // LM head (main and MTP outputs)
  kGemmMhc,         // mHC mixing projections (hc_fn) of pre sites and the HC head
  // Attention core per variant: window + compressed-key scores, softmax, PV and
  // their backward, with the key-set bookkeeping around them.
  kAttnSwa,
  kAttnCsa,
  kAttnHca,
  kCompressor,  // pooling (softmax over the block's slots), not its GEMMs/norm/RoPE
  kIndexer,     // scoring, top-k selection, indexer loss; not its GEMMs/RoPE
  kMhcPre,      // mHC pre: mix RMS, collapse to one stream
  kMhcPost,     // mHC post: expand with the Sinkhorn combination
  kMhcHead,     // HC head
  kSinkhorn,    // gates + Sinkhorn iterations of every mHC pre site
  kRouter,      // scores (sqrt-softplus), top-k, combine weights, balance loss, their backward
  kDispatch,    // counting sort by expert and row gather (permute)
  kCombine,     // weighted sum of expert outputs per token (unpermute)
  kSwiglu,      // the SwiGLU activation of routed and shared experts
  kMoeOther,    // remainder of the MoE block (cache copies, buffers)
  kNorm,        // every RMSNorm (attention/FFN, q/kv, compressor, final, MTP)
  kRope,        // every RoPE application
  kLoss,        // softmax cross-entropy over the LM-head logits (main + MTP)
  kMtpOther,    // MTP glue: stream broadcast/gather of the MTP input
  kZeroGrads,
  kClipGrads,
  kAdamW,
  kMuonNewtonSchulz,
  kMuonOther,  // momentum and the weight update around Newton–Schulz
  kRouterBias,
  kCount
};

// kRecompute: a block's forward run again during backward (activation recomputation).
enum class Phase : uint8_t { kForward, kBackward, kOptimizer, kRecompute, kCount };

const char* op_name(Op op);
const char* phase_name(Phase phase);
// true for the kGemm* roles.
bool is_gemm(Op op);

namespace detail {
inline std::atomic<bool> enabled{false};
void record(Op op, Phase phase, int64_t nanoseconds, double flops);
Phase current_phase();
void set_current_phase(Phase phase);
int64_t now_ns();
bool in_parallel();
}  // namespace detail

inline bool enabled() {
  return detail::enabled.load(std::memory_order_relaxed);
}
void set_enabled(bool on);
void reset();  // clears every counter

// Exclusive time of one (op, phase) since the last reset.
struct Record {
  Op op = Op::kCount;
  Phase phase = Phase::kForward;
  double seconds = 0.0;
  int64_t calls = 0;
  double flops = 0.0;  // as given by the call sites (GEMM roles)
};
// Every (op, phase) with at least one call, in enum order.
std::vector<Record> records();

// The phase new scopes of this thread are recorded under (forward by default).
class PhaseScope {
 public:
  explicit PhaseScope(Phase phase);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase previous_;
};

class Scope {
 public:
  // `flops`: work done inside (GEMM roles), for GFLOP/s.
  explicit Scope(Op op, double flops = 0.0) {
    if (enabled()) begin(op, detail::current_phase(), flops);
  }
  Scope(Op op, Phase phase, double flops = 0.0) {
    if (enabled()) begin(op, phase, flops);
  }
  ~Scope() {
    if (active_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin(Op op, Phase phase, double flops);
  void end();
  bool active_ = false;
  Op op_ = Op::kCount;
  Phase phase_ = Phase::kForward;
  double flops_ = 0.0;
  int64_t start_ns_ = 0;
  int64_t child_ns_ = 0;  // inclusive time of the nested scopes
  Scope* parent_ = nullptr;
};

// FLOPs of Y[M,N] = X[M,K] Wᵀ (2 per multiply-add) and of its backward (dX and dW).
inline double linear_flops(int64_t m, int64_t n, int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}
inline double linear_backward_flops(int64_t m, int64_t n, int64_t k) {
  return 2.0 * linear_flops(m, n, k);
}

}  // namespace trex::profile

#define TREX_PROFILE_CONCAT_INNER(a, b) a##b
#define TREX_PROFILE_CONCAT(a, b) TREX_PROFILE_CONCAT_INNER(a, b)
// TREX_PROFILE(Op::kX) or TREX_PROFILE(Op::kX, flops) or TREX_PROFILE(Op::kX, Phase::kY, flops):
// times the rest of the enclosing block.
#define TREX_PROFILE(...) \
  ::trex::profile::Scope TREX_PROFILE_CONCAT(trex_profile_scope_, __LINE__)(__VA_ARGS__)
