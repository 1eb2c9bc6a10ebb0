#pragma once
// Next-token sampling from one row of logits: greedy, or temperature + top-p.
#include <cstdint>

#include "trex/core/rng.hpp"

namespace trex::infer {

struct SamplingOptions {
  double temperature = 0.0;  // 0 = greedy (arg max, lowest id on ties)
  double top_p = 1.0;        // nucleus mass in (0, 1]
};

// Draws one token from logits [vocab]. Greedy needs no random numbers; otherwise
// softmax(logits / temperature), restricted to the smallest most-probable set of
// mass >= top_p (at least one token), sampled with one uniform from rng.
template <class T>
int64_t sample_token(const T* logits, int64_t vocab, const SamplingOptions& options,
                     trex::Rng& rng);

// log softmax(logits / temperature)[token] and the entropy −Σ p·log p of that
// distribution, max-subtracted, sums in double.
struct TokenLogProb {
  double log_prob = 0.0;
  double entropy = 0.0;
};
template <class T>
TokenLogProb token_log_prob(const T* logits, int64_t vocab, int64_t token,
                            double temperature = 1.0);

}  // namespace trex::infer
