#pragma once
// The parameter inventory of a DeepSeek-V4 model and the flat buffers that hold
// it. Names are the released checkpoint names (spec §4); model/weights.* maps
// them to and from the transformers port's names. Tensors are ordered dense
// first, then routed experts, so that the two parallel roles (replicated vs
// expert-sharded) are each one contiguous range of the flat buffers.
#include <cstdint>
#include <map>
#include <string>
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

// Flat storage: values and gradients in one buffer each, same offsets.
template <class T>
class ParamStore {
 public:
  ParamStore() = default;
  explicit ParamStore(std::vector<ParamSpec> specs);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const ParamSpec& spec(const std::string& name) const;
  int64_t offset(const std::string& name) const;

  T* value(const std::string& name) { return values_.data() + offset(name); }
  const T* value(const std::string& name) const { return values_.data() + offset(name); }
  T* grad(const std::string& name) { return grads_.data() + offset(name); }
  // Null-safe lookups for optional tensors.
  T* value_or_null(const std::string& name);
  T* grad_or_null(const std::string& name);

  std::vector<T>& values() { return values_; }
  const std::vector<T>& values() const { return values_; }
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
  int64_t size() const { return static_cast<int64_t>(values_.size()); }
  // [begin, end) of the dense and expert ranges in the flat buffers.
  std::pair<int64_t, int64_t> range(ParamRole role) const;

 private:
  std::vector<ParamSpec> specs_;
  std::map<std::string, size_t> index_;
  std::vector<int64_t> offsets_;
  std::vector<T> values_;
  PageVector<T> grads_;
};

}  // namespace trex::model
