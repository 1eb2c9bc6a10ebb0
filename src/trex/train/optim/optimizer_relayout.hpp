#pragma once
// Optimizer state across parameter layouts: a state file written for one
// layout (the whole model) loaded into an optimizer over another (a store
// holding only some routed experts, model/expert_shard.hpp), tensor by tensor.
#include <string>
#include <vector>

#include "trex/model/params.hpp"
#include "trex/train/optim/optimizer.hpp"

namespace trex::train {

// Loads `path` (Optimizer::save_state of an optimizer over `file_layout`) into
// `optimizer`, built over `params`: each of params' tensors takes the file's
// state of the same name (the optimizer keeps its ZeRO shard of them). Checks
// the optimizer kind, the file's layout hash and sizes against `file_layout`;
// errors name the file and the field or tensor.
void load_optimizer_state_by_name(Optimizer& optimizer, const model::ParamStore<float>& params,
                                  const std::string& path,
                                  const std::vector<model::ParamSpec>& file_layout);

}  // namespace trex::train
