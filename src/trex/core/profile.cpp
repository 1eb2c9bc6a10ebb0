#include "trex/core/profile.hpp"

#include <array>
#include <chrono>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace trex::profile {
namespace {

constexpr size_t kOps = static_cast<size_t>(Op::kCount);
constexpr size_t kPhases = static_cast<size_t>(Phase::kCount);

struct Counter {
  std::atomic<int64_t> nanoseconds{0};
  std::atomic<int64_t> calls{0};
  std::atomic<double> flops{0.0};
};

std::array<Counter, kOps * kPhases>& counters() {
  static std::array<Counter, kOps * kPhases> all;
  return all;
}

thread_local Scope* innermost = nullptr;
thread_local Phase phase_of_thread = Phase::kForward;

constexpr std::array<const char*, kOps> kOpNames = {
    "embedding",    "gemm.attn_proj", "gemm.compressor",  "gemm.indexer", "gemm.router",
    "gemm.experts", "gemm.shared",    "gemm.mtp_proj",    "gemm.lm_head", "gemm.mhc",
    "attn.swa",     "attn.csa",       "attn.hca",         "compressor",   "indexer",
    "mhc.pre",      "mhc.post",       "mhc.head",         "mhc.sinkhorn", "moe.router",
    "moe.dispatch", "moe.combine",    "moe.swiglu",       "moe.other",    "norm",
    "rope",         "loss.ce",        "mtp.other",        "zero_grads",   "clip_grads",
    "optim.adamw",  "optim.muon_ns",  "optim.muon_other", "router_bias"};

}  // namespace

const char* op_name(Op op) {
  return kOpNames.at(static_cast<size_t>(op));
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "fwd";
    case Phase::kBackward:
      return "bwd";
    case Phase::kOptimizer:
      return "optim";
    case Phase::kRecompute:
      return "recompute";
    case Phase::kCount:
      break;
  }
  return "?";
}

bool is_gemm(Op op) {
  return op >= Op::kGemmAttnProj && op <= Op::kGemmMhc;
}

namespace detail {

void record(Op op, Phase phase, int64_t nanoseconds, double flops) {
  Counter& c = counters()[static_cast<size_t>(op) * kPhases + static_cast<size_t>(phase)];
  c.nanoseconds.fetch_add(nanoseconds, std::memory_order_relaxed);
  c.calls.fetch_add(1, std::memory_order_relaxed);
  if (flops != 0.0) c.flops.fetch_add(flops, std::memory_order_relaxed);
}

Phase current_phase() {
  return phase_of_thread;
}
void set_current_phase(Phase phase) {
  phase_of_thread = phase;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool in_parallel() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

}  // namespace detail

void set_enabled(bool on) {
  detail::enabled.store(on, std::memory_order_relaxed);
}

void reset() {
  for (Counter& c : counters()) {
    c.nanoseconds.store(0, std::memory_order_relaxed);
    c.calls.store(0, std::memory_order_relaxed);
    c.flops.store(0.0, std::memory_order_relaxed);
  }
}

std::vector<Record> records() {
  std::vector<Record> out;
  for (size_t o = 0; o < kOps; ++o)
    for (size_t p = 0; p < kPhases; ++p) {
      const Counter& c = counters()[o * kPhases + p];
      const int64_t calls = c.calls.load(std::memory_order_relaxed);
      if (calls == 0) continue;
      Record r;
      r.op = static_cast<Op>(o);
      r.phase = static_cast<Phase>(p);
      r.seconds = static_cast<double>(c.nanoseconds.load(std::memory_order_relaxed)) * 1e-9;
      r.calls = calls;
      r.flops = c.flops.load(std::memory_order_relaxed);
      out.push_back(r);
    }
  return out;
}

PhaseScope::PhaseScope(Phase phase) : previous_(detail::current_phase()) {
  detail::set_current_phase(phase);
}
PhaseScope::~PhaseScope() {
  detail::set_current_phase(previous_);
}

void Scope::begin(Op op, Phase phase, double flops) {
  // Inside a worker of a parallel region the wall time would be counted once
  // per thread: only the thread that runs the operation records.
  if (detail::in_parallel()) return;
  active_ = true;
  op_ = op;
  phase_ = phase;
  flops_ = flops;
  parent_ = innermost;
  innermost = this;
  start_ns_ = detail::now_ns();
}

void Scope::end() {
  const int64_t elapsed = detail::now_ns() - start_ns_;
  innermost = parent_;
  if (parent_) parent_->child_ns_ += elapsed;
  detail::record(op_, phase_, elapsed - child_ns_, flops_);
}

}  // namespace trex::profile
