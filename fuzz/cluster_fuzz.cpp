// A cluster file (configs/clusters/*.json) for the planner: load and validate,
// the cost model on what was accepted, and the to_json() round trip.
#include <cmath>

#include "fuzz_common.hpp"
#include "trex/parallel/rank_topology.hpp"
#include "trex/plan/cluster.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trex::fuzz::write_scratch("cluster.json", data, size);
  trex::fuzz::expect_only_trex_errors([&] {
    const trex::plan::ClusterSpec c = trex::plan::ClusterSpec::load(path);
    for (bool fp8 : {false, true}) {
      const double e = trex::plan::gemm_efficiency(c, 4096, 7168, 2048, fp8);
      trex::fuzz::check(!std::isnan(e), "gemm_efficiency is NaN");
      trex::fuzz::check(!std::isnan(trex::plan::gemm_seconds(c, 1, 1, 1, fp8)),
                        "gemm_seconds is NaN");
    }
    for (double bytes : {0.0, 1.0, 1e6, 1e12})
      trex::fuzz::check(!std::isnan(trex::plan::collective_efficiency(c, bytes)),
                        "collective_efficiency is NaN");
    (void)trex::parallel::RankTopology::uniform(64, static_cast<int>(c.topology.scale_up_domain),
                                                c.topology.scale_up_gbps,
                                                c.topology.scale_out_gbps);
    const nlohmann::json saved = nlohmann::json::parse(c.to_json().dump());
    const trex::plan::ClusterSpec again = trex::plan::ClusterSpec::from_json(saved, "saved");
    trex::fuzz::check(again.to_json() == saved, "the cluster does not survive to_json()");
  });
  return 0;
}
