#pragma once
// The GRPO objective: group-relative advantages and the token-level clipped
// surrogate with an optional KL penalty to a frozen reference. Pure math on
// flat arrays of doubles; the RL loop gathers the log-probabilities and feeds
// grad_logprobs back into the model's backward. Checked against a PyTorch
// autograd oracle (reference/make_grpo_fixtures.py, tests/fixtures/grpo/).
#include <cstdint>
#include <span>
#include <vector>

namespace trex::rl {

// Group advantages. The rewards of P prompts × G samples, row-major: group g is
// rewards[g·G, (g+1)·G), the G samples of one prompt.
//   mean_g = Σ R / G
//   std_g  = √(Σ (R − mean_g)² / G)            population std (divides by G, not G − 1)
//   A_i    = (R_i − mean_g) / (std_g + ε)      scale_by_std (GRPO)
//   A_i    =  R_i − mean_g                     otherwise (Dr. GRPO)
// A group whose rewards are all exactly equal has no learning signal: its
// advantages are set to exactly 0 (not left to ε) and it counts as uniform.
struct AdvantageOptions {
  bool scale_by_std = true;
  double epsilon = 1e-6;
};

struct GroupAdvantages {
  std::vector<double> advantages;  // one per sample, same order as rewards
  int64_t groups = 0;
  int64_t uniform_groups = 0;  // all rewards equal: no learning signal
  double mean_reward = 0;      // over all samples
  double mean_group_std = 0;   // mean of std_g over groups (uniform groups included, std 0)
};

// Throws trex::Error with field "group_size" when group_size < 1 or
// rewards.size() is not a multiple of it, "rewards" on a non-finite reward and
// "epsilon" on a negative or non-finite epsilon. No rewards: no groups, all zeros.
GroupAdvantages group_advantages(std::span<const double> rewards, int64_t group_size,
                                 const AdvantageOptions& options);

// Token-level clipped surrogate (DAPO token mean over ALL completion tokens of
// the batch; clip_high > clip_low is "clip-higher"), with an optional KL penalty
// to a frozen reference policy (the k3 estimator). Per token t with
// log-probabilities lp (current policy), lp_old (the sampling policy), lp_ref
// (reference) and A (the advantage of the token's sequence):
//   r  = exp(lp − lp_old)
//   pg = −min(r·A, clamp(r, 1 − clip_low, 1 + clip_high)·A)
//   kl = exp(δ) − δ − 1,  δ = lp_ref − lp          (≥ 0; only with a reference)
//   ℓ  = pg + kl_coef·kl
//   L  = Σ_t ℓ_t / N,     N = number of tokens
// The token is "clipped" when (A > 0 and r > 1 + clip_high) or (A < 0 and
// r < 1 − clip_low): then min() picks the constant clamp branch and pg has no
// gradient. On a boundary (r == 1 ± clip) the token is not clipped (a
// subgradient choice: autograd in torch >= 2.14 gives half of −A·r there; see
// reference/README.md). Hence
//   dL/dlp_t = ( −A·r·[not clipped] + kl_coef·(1 − exp(δ)) ) / N
// and at A == 0 the pg term and its gradient are 0. Inputs are checked to be
// finite, but a log-ratio above ~709 still overflows r to +inf (then, for
// A < 0, the loss and gradient are inf): the caller's step guard sees it.
struct ObjectiveOptions {
  double clip_low = 0.2;   // in [0, 1)
  double clip_high = 0.2;  // >= 0
  double kl_coef = 0.0;    // >= 0; 0 = no KL term in the loss
};

struct ObjectiveResult {
  double loss = 0;           // L
  double pg_loss = 0;        // Σ pg / N
  double kl = 0;             // Σ kl / N (reported whenever a reference is given; 0 without one)
  double clip_fraction = 0;  // clipped tokens / N
  double ratio_mean = 0, ratio_max = 0;
  int64_t tokens = 0;                 // N
  std::vector<double> grad_logprobs;  // dL/dlp_t (already divided by N)
};

// All spans are per token, in the same order. token_advantages: A of the
// sequence each token belongs to. ref_logprobs may be empty iff kl_coef == 0 (or N == 0)
// (given with kl_coef == 0, the KL is reported but not in the loss). Sums run
// in token order, so the result is deterministic. N == 0: all zeros, empty
// gradient. Throws trex::Error naming the field on a size mismatch, a
// non-finite input, clip_low outside [0, 1), clip_high < 0 or kl_coef < 0.
ObjectiveResult policy_objective(std::span<const double> logprobs,
                                 std::span<const double> old_logprobs,
                                 std::span<const double> ref_logprobs,
                                 std::span<const double> token_advantages,
                                 const ObjectiveOptions& options);

}  // namespace trex::rl
