#include "trex/infer/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "trex/core/error.hpp"

namespace trex::infer {

template <class T>
int64_t sample_token(const T* logits, int64_t vocab, const SamplingOptions& options,
                     trex::Rng& rng) {
  if (vocab <= 0) throw Error("empty vocabulary").field("vocab_size");
  if (!(options.temperature >= 0.0)) throw Error("must be >= 0").field("temperature");
  if (!(options.top_p > 0.0 && options.top_p <= 1.0))
    throw Error("must be in (0, 1]").field("top_p");
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  if (options.temperature == 0.0) return best;
  const double max_logit = static_cast<double>(logits[best]);
  std::vector<double> prob(static_cast<size_t>(vocab));
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    prob[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / options.temperature);
    total += prob[i];
  }
  const double u = rng.uniform();
  if (options.top_p >= 1.0) {
    double target = u * total, acc = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      acc += prob[i];
      if (acc > target) return i;
    }
    return best;
  }
  // Nucleus: the shortest prefix of the tokens ordered by (probability desc, id
  // asc) whose mass reaches top_p, found by a mass-weighted quickselect (O(V)
  // expected; a full sort per token would dominate decoding of a small model).
  struct Candidate {
    double prob;
    int64_t id;
  };
  std::vector<Candidate> cand(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) cand[i] = {prob[i], i};
  auto more_probable = [](const Candidate& a, const Candidate& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.id < b.id);
  };
  double needed = options.top_p * total;
  size_t lo = 0, hi = cand.size(), cut = cand.size();
  while (lo < hi) {
    if (hi - lo <= 32) {
      std::sort(cand.begin() + lo, cand.begin() + hi, more_probable);
      cut = hi;
      for (size_t k = lo; k < hi; ++k) {
        needed -= cand[k].prob;
        if (needed <= 0.0) {
          cut = k + 1;
          break;
        }
      }
      break;
    }
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(cand.begin() + lo, cand.begin() + mid, cand.begin() + hi, more_probable);
    double top_mass = 0.0;
    for (size_t k = lo; k < mid; ++k) top_mass += cand[k].prob;
    if (top_mass >= needed) {
      hi = mid;  // the cut lies inside [lo, mid)
    } else {
      needed -= top_mass;
      lo = mid;
    }
  }
  if (cut == 0) cut = 1;
  // Sample inside the nucleus, walking it in id order.
  std::vector<uint8_t> kept(static_cast<size_t>(vocab), 0);
  double mass = 0.0;
  for (size_t k = 0; k < cut; ++k) {
    kept[cand[k].id] = 1;
    mass += cand[k].prob;
  }
  const double target = u * mass;
  double acc = 0.0;
  int64_t last = best;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!kept[i]) continue;
    acc += prob[i];
    last = i;
    if (acc > target) return i;
  }
  return last;
}

template <class T>
TokenLogProb token_log_prob(const T* logits, int64_t vocab, int64_t token, double temperature) {
  const double inv = 1.0 / temperature;
  double mx = static_cast<double>(logits[0]) * inv;
  for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(logits[v]) * inv);
  double sum = 0.0, weighted = 0.0;  // Σ e^(z−m), Σ e^(z−m)·(z−m)
  for (int64_t v = 0; v < vocab; ++v) {
    const double shifted = static_cast<double>(logits[v]) * inv - mx;
    const double e = std::exp(shifted);
    sum += e;
    weighted += e * shifted;
  }
  const double log_sum = std::log(sum);
  TokenLogProb out;
  out.log_prob = static_cast<double>(logits[token]) * inv - mx - log_sum;
  out.entropy = log_sum - weighted / sum;  // −Σ p·(z − m − log Σ)
  return out;
}

template TokenLogProb token_log_prob(const float*, int64_t, int64_t, double);
template TokenLogProb token_log_prob(const double*, int64_t, int64_t, double);
template int64_t sample_token(const float*, int64_t, const SamplingOptions&, trex::Rng&);
template int64_t sample_token(const double*, int64_t, const SamplingOptions&, trex::Rng&);

}  // namespace trex::infer
