// The expert-placement inputs of `trex plan experts` and `trex train`: a rank
// topology file, an expert-load profile and an expert map. Input: the three
// files' texts separated by NUL bytes (raw JSON never holds one); a missing
// part is skipped. When the topology and the profile load (and are small) the
// placement runs on them, and the map is checked against them as the trainer
// checks it.
#include <cstring>
#include <optional>
#include <vector>

#include "fuzz_common.hpp"
#include "trex/parallel/expert_plan.hpp"

namespace {

using namespace trex::parallel;

constexpr int kMaxRanks = 64;
constexpr int kMaxExperts = 256;
constexpr int kMaxLayers = 8;

std::vector<std::string_view> split_nul(std::string_view input, size_t parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const size_t nul = input.find('\0');
    if (nul == std::string_view::npos) break;
    out.push_back(input.substr(0, nul));
    input.remove_prefix(nul + 1);
  }
  out.push_back(input);
  return out;
}

std::string write_part(const char* name, std::string_view text) {
  return trex::fuzz::write_scratch(name, reinterpret_cast<const uint8_t*>(text.data()),
                                   text.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = split_nul(trex::fuzz::as_text(data, size), 3);
  std::optional<RankTopology> topology;
  trex::fuzz::expect_only_trex_errors([&] {
    const std::string path = write_part("topology.json", parts[0]);
    topology = RankTopology::load(path);
    trex::fuzz::check(topology->ranks() > 0, "a topology without ranks");
    trex::fuzz::check(topology->nodes() > 0 && topology->nodes() <= topology->ranks(),
                      "node count outside [1, ranks]");
    for (int node = 0; node < topology->nodes() && node < kMaxRanks; ++node)
      trex::fuzz::check(!topology->ranks_on_node(node).empty(), "an empty node");
    trex::fuzz::check(
        RankTopology::from_json(topology->to_json(), "saved").same_partition(*topology),
        "the topology does not survive to_json()");
    if (topology->ranks() >= 2) (void)topology->group(1, topology->ranks() - 1);
    std::string note;
    (void)first_ep_group(*topology, topology->ranks(), &note);
  });
  const int ranks = topology ? topology->ranks() : 2;
  std::optional<ExpertLoad> load;
  if (parts.size() > 1)
    trex::fuzz::expect_only_trex_errors([&] {
      load = ExpertLoad::load(write_part("load.json", parts[1]), ranks);
      trex::fuzz::check(load->source_ranks() == ranks, "profile rows != EP ranks");
    });
  if (parts.size() > 2)
    trex::fuzz::expect_only_trex_errors([&] {
      const std::string path = write_part("map.json", parts[2]);
      const ExpertPlacement p = load_expert_placement(path);
      (void)expert_placement_from_json(expert_placement_json(p), "saved");
      const int layers = load ? load->num_layers() : static_cast<int>(p.layers.size());
      const int experts = load ? load->experts() : static_cast<int>(p.layers.front().size());
      check_expert_placement(p, layers, experts, ranks, path);
      if (load && topology && ranks <= kMaxRanks && experts <= kMaxExperts)
        (void)traffic_report(*load, p, *topology, {});
    });
  if (topology && load && topology->ranks() <= kMaxRanks && load->experts() <= kMaxExperts &&
      load->num_layers() <= kMaxLayers)
    trex::fuzz::expect_only_trex_errors([&] {
      const ExpertPlan plan = plan_expert_placement(*load, *topology, {}, "bf16", 7168, "load");
      trex::fuzz::check(static_cast<int>(plan.placed.placement.layers.size()) == load->num_layers(),
                        "the placement has another layer count");
      (void)format_expert_plan(plan, true);
      (void)expert_plan_json(plan);
    });
  return 0;
}
