// A model config.json (either key scheme): load and validate, then the derived
// per-layer queries, and the round trip through to_json() that checkpoints use.
#include "fuzz_common.hpp"
#include "trex/model/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trex::fuzz::write_scratch("config.json", data, size);
  trex::fuzz::expect_only_trex_errors([&] {
    const trex::model::ModelConfig c = trex::model::ModelConfig::load(path);
    for (int64_t layer = 0; layer < c.total_layers() && layer < 4096; ++layer) {
      (void)c.attention_kind(layer);
      (void)c.ratio(layer);
      (void)c.is_hash_layer(layer);
    }
    (void)c.has_csa_layer();
    (void)c.nope_head_dim();
    (void)c.hc_mix_dim();
    (void)c.heads_per_group();
    const nlohmann::json saved = nlohmann::json::parse(c.to_json().dump());
    const trex::model::ModelConfig again =
        trex::model::ModelConfig::from_json(saved, "saved config.json");
    trex::fuzz::check(again.to_json() == saved, "config.json does not survive to_json()");
  });
  return 0;
}
