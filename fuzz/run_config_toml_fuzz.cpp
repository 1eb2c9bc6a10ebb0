// The `trex train` run config as TOML (toml++ into the same validating reader).
#include "run_config_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return run_config_one("run.toml", data, size);
}
