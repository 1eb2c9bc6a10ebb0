// The `trex train` run config as JSON.
#include "run_config_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return run_config_one("run.json", data, size);
}
