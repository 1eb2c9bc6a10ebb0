#pragma once
// The parameter inventory of a DeepSeek-V4 model and the flat buffers that hold
// it. Names are the released checkpoint names (spec §4); model/weights.* maps
// them to and from the transformers port's names. Tensors are ordered dense
// first, then routed experts, so that the two parallel roles (replicated vs
// expert-sharded) are each one contiguous range of the flat buffers.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "trex/model/config.hpp"
#include "trex/model/page_buffer.hpp"

namespace trex::model {

enum class ParamRole { kDense, kExpert };
// Spec §6: Muon for matrices; AdamW for embedding, head, norms, mHC base/scale,
// ape, sinks; router bias is moved by the aux-loss-free rule, not an optimizer.
enum class OptimizerGroup { kMuon, kAdamW, kNotTrained };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  ParamRole role = ParamRole::kDense;
  OptimizerGroup group = OptimizerGroup::kAdamW;
  int64_t layer = -1;   // block index (MTP blocks: num_hidden_layers + j); -1 for globals
  int64_t expert = -1;  // routed expert index, -1 otherwise
  int64_t numel() const;
};

// Every floating-point parameter of the model (tid2eid tables are integer
// buffers, listed separately by hash_table_names).
std::vector<ParamSpec> parameter_specs(const ModelConfig& config);
std::vector<std::string> hash_table_names(const ModelConfig& config);  // layers.N.ffn.gate.tid2eid

// How a ParamStore holds the parameter values. kBF16 (run config param_dtype =
// "bf16", float stores only): 2 bytes per trained value (the bf16 rounding the
// optimizer writes from its fp32 master), 4 bytes per not-trained value (the
// router bias, moved by small steps a bf16 value would lose). Compute reads
// weights through weight(): decoded to fp32 per tensor, exactly (bf16 widens
// without rounding), so a kBF16 store computes bit for bit what a kF32 store
// holding the same rounded values computes.
enum class ParamStorage { kF32, kBF16 };
const char* to_string(ParamStorage storage);

// Bytes of the values of `specs` held as `storage` (ParamStore::value_bytes),
// for fp32 models: 4 per value, or on kBF16 2 per trained + 4 per not-trained.
int64_t parameter_value_bytes(const std::vector<ParamSpec>& specs, ParamStorage storage);
// The most decoded-weight bytes a kBF16 store of `specs` holds during one
// forward or backward pass (ParamStore::weight): its trained globals (layer
// -1, decoded once per pass; not the embedding, whose rows are gathered from
// its 16 bits) plus its largest block's trained tensors (one block is decoded
// at a time). An upper bound, reached when the largest block is the last one
// a pass decodes before the head; 0 for kF32.
int64_t decoded_weight_bytes_bound(const std::vector<ParamSpec>& specs, ParamStorage storage);

// Flat storage: values and gradients in one buffer each, same offsets.
template <class T>
class ParamStore {
 public:
  ParamStore() = default;
  explicit ParamStore(std::vector<ParamSpec> specs);
  ParamStore(ParamStore&& other) noexcept;
  ParamStore& operator=(ParamStore&& other) noexcept;
  ParamStore(const ParamStore& other);
  ParamStore& operator=(const ParamStore& other);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const ParamSpec& spec(const std::string& name) const;
  int64_t offset(const std::string& name) const;

  // The values in place: any tensor of a kF32 store, the not-trained tensors
  // of a kBF16 store (kept in fp32); a bf16-stored tensor throws, naming it
  // (use weight(), read() and write() there).
  T* value(const std::string& name) { return value_at(spec_index(name)); }
  const T* value(const std::string& name) const {
    return const_cast<ParamStore*>(this)->value(name);
  }
  T* grad(const std::string& name) { return grads_.data() + offset(name); }
  // Null-safe lookups for optional tensors.
  T* value_or_null(const std::string& name);
  T* grad_or_null(const std::string& name);

  std::vector<T>& values();
  const std::vector<T>& values() const { return const_cast<ParamStore*>(this)->values(); }

  // ---- Either storage ---------------------------------------------------------
  ParamStorage storage() const { return storage_; }
  // Converts the values: kF32 -> kBF16 rounds every trained value to nearest
  // even (the not-trained ones stay fp32); kBF16 -> kF32 widens exactly.
  // Drops decoded weights.
  void set_storage(ParamStorage storage);
  // The values of tensor `name` for compute, as T: kF32 in place; kBF16
  // decoded into a buffer the store keeps until release_decoded(), or, for a
  // block's tensor (layer >= 0), until a tensor of another block is decoded:
  // one block's weights at a time, the globals (layer -1) for the pass.
  // Null for a tensor the store does not hold (optional tensors).
  const T* weight(const std::string& name) const;
  // kBF16: the 16-bit values of a trained tensor in place (ops that read bf16
  // directly, such as the embedding's row gather); null on kF32 storage and
  // for not-trained tensors.
  const uint16_t* bf16_weight(const std::string& name) const;
  // Forgets every decoded weight (pointers from weight() dangle afterwards).
  void release_decoded() const;
  // Bytes of decoded weights held now, and the most held at once since
  // construction (the memory accounting's "decoded" figure).
  int64_t decoded_bytes() const;
  int64_t peak_decoded_bytes() const;
  // Values of the flat range [begin, end) as T, into out (end - begin values).
  void read(int64_t begin, int64_t end, T* out) const;
  // All values as T (a copy, either storage).
  std::vector<T> copy_values() const;
  // Sets the flat range [begin, end) from in: kF32 copies, kBF16 rounds the
  // trained values to nearest even and keeps the not-trained ones exact.
  void write(int64_t begin, int64_t end, const T* in);
  // kBF16: the 16-bit values of the whole flat buffer (not-trained positions
  // are unused there; their values are in a side buffer), for collectives that
  // move a range of them as they are stored. Throws on kF32 storage.
  uint16_t* bf16_values();
  // Bytes the values occupy (2 per trained + 4 per not-trained value on
  // kBF16; sizeof(T) each on kF32), decoded weights not included.
  int64_t value_bytes() const;
  // Page-backed (model/page_buffer.hpp) so that zeroing and ZeRO-2 can give
  // the physical memory of gradients no longer needed back to the system.
  PageVector<T>& grads() { return grads_; }
  const PageVector<T>& grads() const { return grads_; }
  // Sets every gradient to zero without committing pages: resident pages are
  // written, released ones are left released (they read zero and cost no
  // memory until backward writes them).
  void zero_grads();
  // The gradients in [begin, end) are not needed any more: the whole pages
  // inside give their memory back and read zero; the rest keeps its values.
  // Call zero_grads() before accumulating into the buffer again.
  void release_grads(int64_t begin, int64_t end);
  int64_t size() const { return total_; }
  // [begin, end) of the dense and expert ranges in the flat buffers.
  std::pair<int64_t, int64_t> range(ParamRole role) const;

 private:
  T* value_at(size_t spec_index);
  size_t spec_index(const std::string& name) const;
  // Decoded weights of a kBF16 store, one buffer per tensor (stable pointers).
  struct Decoded {
    mutable std::mutex mutex;
    std::unordered_map<size_t, std::vector<T>> tensors;
    int64_t bytes = 0, peak_bytes = 0;
  };

  std::vector<ParamSpec> specs_;
  std::map<std::string, size_t> index_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
  ParamStorage storage_ = ParamStorage::kF32;
  std::vector<T> values_;             // kF32
  std::vector<uint16_t> bf16_;        // kBF16: trained values
  std::vector<std::vector<T>> side_;  // kBF16: not-trained values, by spec index
  std::unique_ptr<Decoded> decoded_ = std::make_unique<Decoded>();
  PageVector<T> grads_;
};

}  // namespace trex::model
