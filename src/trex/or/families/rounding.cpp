#include "trex/or/families/rounding.hpp"

#include <cmath>

namespace trex::orlib {

double round_up(double v, double step) {
  return step * std::ceil(v / step - 1e-9);
}

double round_down(double v, double step) {
  return step * std::floor(v / step + 1e-9);
}

}  // namespace trex::orlib
