// CPLEX LP text through the solver facade (LinearModel::from_lp).
#include "solver_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(trex::fuzz::as_text(data, size));
  trex::fuzz::expect_only_trex_errors([&] {
    LinearModel model = LinearModel::from_lp(text, "model.lp");
    exercise(model);
  });
  return 0;
}
