// The recompute modes' names, apart from the model code: run-config parsing
// (and the fuzz targets built on it) uses them without linking the model.
#include "trex/model/model.hpp"

namespace trex::model {

const char* activation_recompute_name(ActivationRecompute recompute) {
  switch (recompute) {
    case ActivationRecompute::kFull:
      return "full";
    case ActivationRecompute::kSelective:
      return "selective";
    case ActivationRecompute::kNone:
      break;
  }
  return "none";
}

}  // namespace trex::model
