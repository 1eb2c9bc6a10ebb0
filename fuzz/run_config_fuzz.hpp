#pragma once
// Shared body of the JSON and TOML run-config targets: load (the extension
// picks the parser) and validate, then the round trip through to_json() (the
// run config a training run writes next to its checkpoints).
#include "fuzz_common.hpp"
#include "trex/train/run_config.hpp"

namespace {

int run_config_one(const char* file_name, const uint8_t* data, size_t size) {
  const std::string path = trex::fuzz::write_scratch(file_name, data, size);
  trex::fuzz::expect_only_trex_errors([&] {
    const trex::train::RunConfig c = trex::train::RunConfig::load(path);
    (void)c.accumulation_steps();
    (void)c.schedule(c.steps > 0 ? c.steps : 1);
    const nlohmann::json saved = nlohmann::json::parse(c.to_json().dump());
    try {
      const trex::train::RunConfig again = trex::train::RunConfig::from_json(saved, "saved");
      trex::fuzz::check(again.to_json() == saved, "the run config does not survive to_json()");
    } catch (const trex::Error& e) {
      trex::fuzz::fail(std::string("an accepted run config, written back, is rejected: ") +
                       e.what());
    }
  });
  return 0;
}

}  // namespace
