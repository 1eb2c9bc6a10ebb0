#pragma once
// The shapes, weights and gradients of one DeepSeek-V4 MoE block, shared by its
// router (moe_router.hpp), its experts (moe_experts.hpp) and the layer that
// wires them through a token dispatcher (moe.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "trex/core/error.hpp"

namespace trex::model {

// Token rows [row, row + len) of the flattened batch.
struct MoeSequence {
  int64_t row = 0;
  int64_t len = 0;
};

struct MoeDims {
  int64_t batch = 1;            // B sequences ...
  int64_t seq = 0;              // ... of S tokens each; token (b, t) is row b·S + t
  int64_t hidden = 0;           // d
  int64_t n_experts = 0;        // E routed experts
  int64_t top_k = 0;            // K experts per token
  int64_t inter = 0;            // I, routed and shared expert width
  double routed_scaling = 1.0;  // γ
  double swiglu_limit = 0.0;    // L; <= 0 disables the clamp
  bool hash_routed = false;     // selection from tid2eid instead of TopK(s + b)
  bool norm_topk_prob = true;
  double balance_loss_weight = 0.0;  // α; 0 disables the balance loss
  bool balance_loss_on_hash_layers = false;
  int64_t vocab = 0;  // rows of tid2eid (hash layers; token ids are checked against it)
  // Sequences of the balance loss when they are not the B rows (packed documents):
  // disjoint, in [0, B·S). Empty: the B rows of S tokens.
  std::vector<MoeSequence> balance_sequences;

  int64_t tokens() const { return batch * seq; }
};

template <class T>
struct MoeWeights {
  const T* gate = nullptr;           // [E, d] router weight
  const T* gate_bias = nullptr;      // [E] selection bias (score layers; may be null = zeros)
  const int64_t* tid2eid = nullptr;  // [vocab, K] (hash layers)
  std::vector<const T*> w1, w2, w3;  // per routed expert: w1, w3 [I, d], w2 [d, I]
  const T* shared_w1 = nullptr;      // shared expert [I, d] / [d, I] / [I, d];
  const T* shared_w2 = nullptr;      // all three null = no shared expert
  const T* shared_w3 = nullptr;
};

// Parameter gradients, accumulated (+=). Any pointer may be null (frozen), and
// the expert vectors may be empty. No gradient exists for gate_bias or tid2eid.
template <class T>
struct MoeGrads {
  T* gate = nullptr;
  std::vector<T*> w1, w2, w3;
  T* shared_w1 = nullptr;
  T* shared_w2 = nullptr;
  T* shared_w3 = nullptr;
};

// trex::Error "moe: <message>" naming `field`.
Error moe_error(const std::string& message, const std::string& field);

}  // namespace trex::model
