#pragma once
// The whole DeepSeek-V4 model: embedding → L blocks (mHC around attention and
// MoE) → HC head → norm → LM head, plus the depth-1 MTP block, with the
// training loss (spec §2, §3) and its exact backward. Blocks are driven
// explicitly in order (docs/engine.md); this file only wires them together.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "trex/kernels/backend.hpp"
#include "trex/model/config.hpp"
#include "trex/model/params.hpp"
#include "trex/model/weights.hpp"

namespace trex::model {

template <class T>
class TokenDispatchers;  // token_dispatcher.hpp

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
  // Per-token loss weights (the policy-gradient step, docs/rl.md): the LM loss on
  // labels[r] counts loss_weights[r]·CE in the loss and in its gradient (a weight
  // may be negative or 0; the token still counts in lm_tokens). Empty: 1 for every
  // token. Needs mtp_weight = 0: the MTP loss has no weights.
  std::vector<float> loss_weights;  // [B·S] or empty
};

struct LossOptions {
  double mtp_weight = 0.3;           // λ (spec §2.10); 0 skips the MTP block entirely
  double balance_loss_weight = 0.0;  // α of the sequence-wise balance loss (spec §3.3)
  bool balance_loss_on_hash_layers = false;
  bool indexer_loss = false;  // KL indexer loss on CSA layers (spec §3.2)
  double indexer_loss_weight = 1.0;
  // The LM loss (and label_log_probs) on logits / τ: the policy of a sampler at
  // temperature τ (the policy-gradient step, docs/rl.md). Needs mtp_weight = 0 unless 1.
  double logit_temperature = 1.0;
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
  // The gradient is gradient_weight · ∇(mean loss of the batch) (see
  // forward_stage). The trainer passes the micro-batch's trained tokens nᵢ so
  // that under expert parallelism the token rows other ranks send back for an
  // expert already carry their own micro-batch's weight.
  double gradient_weight = 1.0;
  // When set, receives [B·S]: at every r whose label is a target, log p(labels[r] | the
  // tokens before r) under the model (= −CE of that token); 0 elsewhere. Head stage only.
  std::vector<double>* label_log_probs = nullptr;
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

// One pipeline stage (docs/pipeline-parallel.md): the main layers
// [first_layer, last_layer), optionally preceded by the embedding and followed
// by the head — HC head → final norm → LM head + loss, and the MTP block (which
// reads the embedding too: a tied use, both uses add into its gradient). An
// empty layer range is allowed (the stage passes its input through).
struct StageSpec {
  int64_t first_layer = 0;
  int64_t last_layer = 0;  // exclusive
  bool has_embedding = false;
  bool has_head = false;
  bool operator==(const StageSpec&) const = default;
};

// Activation recomputation (Megatron's recompute granularity). kNone: every
// block keeps its activations from forward to backward. kFull: a forward that
// prepares a backward keeps only each block's input streams [N, n, d] and
// the block's forward runs again at the start of its backward, into one
// scratch cache reused block after block (the MTP block likewise); the
// kernels are deterministic, so gradients are bitwise those of kNone. The
// heads and the MTP block's embedding/projection inputs keep their activations.
// kSelective: every block keeps its activations except the cheap-to-recompute,
// memory-heavy ones — the mHC pre outputs and the RMSNorm outputs (attention
// and FFN inputs), attention's normed and rotated c_Q / q / kv, and the
// attention core's probabilities and outputs — which are recomputed at the
// start of the block's backward (no GEMM, no collective; bitwise as kNone).
enum class ActivationRecompute { kNone, kSelective, kFull };
const char* activation_recompute_name(
    ActivationRecompute recompute);  // "none", "selective", "full"

// The whole model as one stage (what forward_backward runs).
StageSpec whole_model_stage(const ModelConfig& config);

// Whether a rank that runs `stages` stores tensor `spec` (pipeline stages own
// only their layers): its blocks' tensors, embed.weight with the embedding,
// the head's tensors (HC head, final norm, LM head) and the MTP blocks with the
// head — and embed.weight there too when the model has MTP blocks, which read
// it (a tied copy, see holds_tied_embedding).
bool stages_hold(const ModelConfig& config, std::span<const StageSpec> stages,
                 const ParamSpec& spec);
// Whether `stages` hold embed.weight only as the MTP block's tied copy (the
// head without the embedding): that copy's gradient is summed with the
// embedding stage's before the update, and only the embedding stage saves it.
bool holds_tied_embedding(const ModelConfig& config, std::span<const StageSpec> stages);

template <class T>
class Model;

// What one stage keeps of one micro-batch between its forward and its backward
// (activations, selections, the head's loss gradient). One cache per
// (micro-batch, stage) in flight; reusable after the backward.
template <class T>
class StageCache {
 public:
  StageCache();
  ~StageCache();
  StageCache(StageCache&&) noexcept;
  StageCache& operator=(StageCache&&) noexcept;
  void clear();  // frees the activations
  bool empty() const;

 private:
  friend class Model<T>;
  struct Impl;
  std::unique_ptr<Impl> impl_;
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

  // Forward only: StepOptions::label_log_probs of `batch` ([B·S], 0 where no target)
  // under softmax(logits / temperature); no gradients, no MTP or balance loss.
  std::vector<double> label_log_probs(const Batch& batch, double temperature = 1.0);

  // Stage-wise execution (pipeline parallelism, docs/pipeline-parallel.md).
  // Running the stages of a partition in order, forward then backward in
  // reverse, is forward_backward (same operations in the same order).
  //
  // forward_stage: x_in [B·S, hc_mult, hidden] is the previous stage's output
  // (ignored, may be null, when the stage has the embedding); x_out receives this
  // stage's output (ignored, may be null, when it has the head). The returned
  // breakdown holds this stage's part: balance / indexer losses of its layers,
  // expert_load indexed by block (num_hidden_layers entries, empty outside the
  // stage; the head stage appends the MTP block's), and on the head stage lm,
  // mtp and the token counts. logits / mtp_logits as in forward_backward (head
  // stage only).
  //
  // gradient_weight w scales every loss of this micro-batch in its gradient:
  // the gradient is w · ∇(mean loss of the micro-batch). w = 1 is
  // forward_backward; the pipeline passes w = count_lm_targets(batch), so that
  // micro-batches accumulate Σ n_i g_i and the trainer divides by Σ n_i. It is
  // known at forward time on every stage (it depends only on the labels), and
  // the head stage seeds its LM / MTP gradients with it during the forward.
  LossBreakdown forward_stage(const StageSpec& stage, const Batch& batch, const LossOptions& loss,
                              const StepOptions& step, double gradient_weight, const T* x_in,
                              T* x_out, StageCache<T>& cache, T* logits = nullptr,
                              T* mtp_logits = nullptr);
  // d_out [B·S, hc_mult, hidden] = dLoss/d(x_out) (ignored on the head stage,
  // which starts from its own loss); d_in receives dLoss/d(x_in) (ignored on the
  // embedding stage). Parameter gradients of the stage accumulate into
  // params().grads(). Needs a forward_stage with step.backward into `cache`.
  void backward_stage(StageCache<T>& cache, const T* d_out, T* d_in);

  // LM targets of the batch (what LossBreakdown::lm_tokens will be): n_i.
  int64_t count_lm_targets(const Batch& batch) const;
  // Elements of the hidden streams passed between stages: B·S·hc_mult·hidden.
  int64_t stage_activation_size(const Batch& batch) const;

  // Aux-loss-free router-bias update (spec §3.3) from the loads of the last
  // forward_backward, on every score-routed block.
  void update_router_biases(const LossBreakdown& last, double speed);

  // Where every MoE block sends its routed tokens (token_dispatcher.hpp;
  // blocks: main layers, then MTP), e.g. parallel::EpTokenDispatchers for
  // expert parallelism. Not owned; must outlive its use; null (default): a
  // LocalTokenDispatcher per block. With expert-parallel dispatchers
  // forward_backward is collective over the EP group: all its ranks call it
  // with the same options and sequence length.
  void set_token_dispatchers(TokenDispatchers<T>* dispatchers) { token_dispatchers_ = dispatchers; }
  TokenDispatchers<T>* token_dispatchers() const { return token_dispatchers_; }

  // The backend every op of the model runs on (default: the CPU backend; not
  // owned, must outlive its use) and the precision its GEMMs multiply in
  // (default fp32; the mHC and router GEMMs always multiply in fp32).
  void set_backend(const kernels::Backend& backend) { ops_.backend = &backend; }
  void set_compute_precision(kernels::Precision precision) { ops_.precision = precision; }
  kernels::Precision compute_precision() const { return ops_.precision; }
  // Activation recomputation of forwards that prepare a backward (default kNone).
  // kFull cannot serve StepOptions::fixed_selection (the selections are not kept).
  void set_activation_recompute(ActivationRecompute recompute) { recompute_ = recompute; }
  ActivationRecompute activation_recompute() const { return recompute_; }
  const kernels::OpContext& op_context() const { return ops_; }

 private:
  struct State;
  void check_stage(const StageSpec& stage) const;
  ModelConfig config_;
  ParamStore<T> params_;
  HashTables hash_tables_;
  std::unique_ptr<State> state_;
  TokenDispatchers<T>* token_dispatchers_ = nullptr;
  kernels::OpContext ops_;
  ActivationRecompute recompute_ = ActivationRecompute::kNone;
};

}  // namespace trex::model
