#pragma once
// The whole DeepSeek-V4 model: embedding → L blocks (mHC around attention and
// MoE) → HC head → norm → LM head, plus the depth-1 MTP block, with the
// training loss (spec §2, §3) and its exact backward. Blocks are driven
// explicitly in order (docs/engine.md); this file only wires them together.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "trex/model/config.hpp"
#include "trex/model/params.hpp"
#include "trex/model/weights.hpp"

namespace trex::model {

// B sequences of S tokens. labels follow the HF convention: labels[b, t] is the
// token expected at position t (so position t is trained to predict
// labels[b, t+1]); -100 (any negative) masks a target. Empty labels = input_ids.
struct Batch {
  int64_t B = 0;
  int64_t S = 0;
  std::vector<int64_t> input_ids;  // [B·S]
  std::vector<int64_t> labels;     // [B·S] or empty
  // Packed sequences (docs/training.md): per-token RoPE positions restarting at
  // every segment, and segment ids (non-decreasing along a row). Both empty:
  // one document per row at positions 0..S−1.
  std::vector<int64_t> position_ids;  // [B·S] or empty
  std::vector<int64_t> document_ids;  // [B·S] or empty
};

struct LossOptions {
  double mtp_weight = 0.3;           // λ (spec §2.10); 0 skips the MTP block entirely
  double balance_loss_weight = 0.0;  // α of the sequence-wise balance loss (spec §3.3)
  bool balance_loss_on_hash_layers = false;
  bool indexer_loss = false;  // KL indexer loss on CSA layers (spec §3.2)
  double indexer_loss_weight = 1.0;
};

struct StepOptions {
  bool backward = true;
  // Reuse the router / indexer selections of the previous call (same batch
  // shape): finite-difference checks hold discrete choices fixed (spec §3.1).
  bool fixed_selection = false;
  // Called during backward when the gradients of a group of parameters are
  // final for this call: each MTP block (layer num_hidden_layers + j), then
  // blocks L−1..0, then -1 for the globals (embedding, heads, final norm).
  // Distributed training starts reducing those gradients while backward goes on.
  std::function<void(int64_t layer)> on_gradients_ready = {};
};

struct LossBreakdown {
  double total = 0.0;     // lm + λ·mtp + balance + indexer_weight·indexer
  double lm = 0.0;        // mean next-token CE
  double mtp = 0.0;       // mean MTP CE (unweighted)
  double balance = 0.0;   // Σ over layers of the (α-weighted) balance loss
  double indexer = 0.0;   // Σ over CSA layers of the indexer KL loss
  int64_t lm_tokens = 0;  // counted targets
  int64_t mtp_tokens = 0;
  // Tokens routed to each expert, per block (main layers, then MTP blocks).
  std::vector<std::vector<int64_t>> expert_load;
};

template <class T>
class Model {
 public:
  explicit Model(ModelConfig config);  // parameters zero; call init_random or load
  Model(ModelConfig config, ParamStore<T> params, HashTables hash_tables);
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  static Model from_checkpoint(const std::string& dir, NamingScheme* scheme = nullptr);

  const ModelConfig& config() const { return config_; }
  ParamStore<T>& params() { return params_; }
  const ParamStore<T>& params() const { return params_; }
  HashTables& hash_tables() { return hash_tables_; }
  const HashTables& hash_tables() const { return hash_tables_; }

  // HF-style init (N(0, initializer_range) matrices, unit norms, zero sinks /
  // ape / router bias, mHC scale 1, base 0) and a balanced random tid2eid table
  // with distinct experts per token. Deterministic in `seed`.
  void init_random(uint64_t seed);

  // Forward, loss and (optionally) backward for one batch. Parameter gradients
  // accumulate into params().grads(). logits (nullable) receives [B·S, V];
  // mtp_logits (nullable) receives [B·(S−1), V] of the MTP head.
  LossBreakdown forward_backward(const Batch& batch, const LossOptions& loss,
                                 const StepOptions& step = {}, T* logits = nullptr,
                                 T* mtp_logits = nullptr);

  // Aux-loss-free router-bias update (spec §3.3) from the loads of the last
  // forward_backward, on every score-routed block.
  void update_router_biases(const LossBreakdown& last, double speed);

 private:
  struct State;
  ModelConfig config_;
  ParamStore<T> params_;
  HashTables hash_tables_;
  std::unique_ptr<State> state_;
};

}  // namespace trex::model
