#include "trex/parallel/expert_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "trex/core/error.hpp"

namespace trex::parallel {

namespace {

using json = nlohmann::json;

__attribute__((format(printf, 2, 3))) void appendf(std::string& out, const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  out += buffer;
}

}  // namespace

RankTopology first_ep_group(const RankTopology& world, int ep, std::string* note) {
  if (ep <= 0 || world.ranks() % ep != 0)
    throw Error("must divide the topology's " + std::to_string(world.ranks()) + " ranks")
        .field("--ep");
  const RankTopology group = world.group(0, ep);
  for (int g = 1; g < world.ranks() / ep; ++g)
    if (!world.group(g * ep, ep).same_partition(group)) {
      if (note)
        *note = "EP group " + std::to_string(g) +
                " spans nodes differently from group 0; the map is optimised for group 0 (ranks "
                "0.." +
                std::to_string(ep - 1) + ")";
      break;
    }
  return group;
}

ExpertPlan plan_expert_placement(const ExpertLoad& load, const RankTopology& topology,
                                 const PlacementOptions& options, const std::string& dtype,
                                 int64_t hidden, const std::string& load_source) {
  if (hidden <= 0) throw Error("must be > 0").field("--hidden");
  const int ranks = topology.ranks();
  if (load.source_ranks() != ranks)
    throw Error("has " + std::to_string(load.source_ranks()) + " source ranks, the EP group " +
                std::to_string(ranks))
        .file(load_source)
        .field("layers");
  if (load.experts() % ranks != 0)
    throw Error(std::to_string(load.experts()) + " experts do not split evenly over " +
                std::to_string(ranks) + " EP ranks")
        .file(load_source)
        .field("--ep");
  ExpertPlan plan;
  plan.topology = topology;
  plan.load_source = load_source;
  plan.dtype = dtype;
  plan.traffic.hidden = hidden;
  plan.traffic.bytes_per_element = bytes_per_element(dtype);
  plan.options = options;
  plan.layers = load.num_layers();
  plan.experts = load.experts();
  plan.placed = place_experts(load, topology, options);
  plan.before = traffic_report(load, contiguous_placement(plan.layers, plan.experts, ranks),
                               topology, plan.traffic);
  plan.after = traffic_report(load, plan.placed.placement, topology, plan.traffic);
  const double pair_bytes = 2.0 * static_cast<double>(hidden) * plan.traffic.bytes_per_element;
  for (const LayerPlacement& l : plan.placed.layers)
    plan.inter_node_bytes_lower_bound += l.inter_node_lower_bound * pair_bytes;
  return plan;
}

std::string format_expert_plan(const ExpertPlan& plan, bool per_layer) {
  const RankTopology& topology = plan.topology;
  std::string out, per_node;
  for (int n = 0; n < topology.nodes(); ++n)
    per_node += (n ? "+" : "") + std::to_string(topology.ranks_on_node(n).size());
  appendf(out,
          "topology: %d EP ranks on %d node%s (%s), per rank %.4g GB/s intra-node, %.4g GB/s "
          "inter-node\n",
          topology.ranks(), topology.nodes(), topology.nodes() == 1 ? "" : "s", per_node.c_str(),
          topology.intra_node_gbps, topology.inter_node_gbps);
  appendf(out,
          "load %s: %d MoE layers x %d experts, %.4g token-expert pairs; hidden %lld x %s, "
          "dispatch + combine\n",
          plan.load_source.c_str(), plan.layers, plan.experts, plan.before.total.assignments,
          static_cast<long long>(plan.traffic.hidden), plan.dtype.c_str());
  int met = 0, infeasible = 0;
  for (const LayerPlacement& l : plan.placed.layers) {
    met += l.balance_met ? 1 : 0;
    infeasible += l.balance_infeasible ? 1 : 0;
  }
  appendf(out, "balance: max rank load <= %.3g x mean met in %d/%d layers",
          1 + plan.options.tolerance, met, plan.layers);
  if (met < plan.layers)
    appendf(out,
            " (%d provably infeasible, %d not reached by the search; those layers use the "
            "smallest max load found)",
            infeasible, plan.layers - met - infeasible);
  out += "\n\n";

  auto row = [&](const char* name, const TrafficReport& r) {
    const LayerTraffic& t = r.total;
    appendf(out, "%-12s %14.4g %14.4g %9.1f %13.3f %12.3f %14.4g\n", name, t.inter_node_bytes / 1e9,
            t.intra_node_bytes / 1e9, t.assignments > 0 ? 100.0 * t.local / t.assignments : 0.0,
            t.imbalance(), r.worst_layer_imbalance, t.seconds * 1e3);
  };
  appendf(out, "%-12s %14s %14s %9s %13s %12s %14s\n", "map", "inter-node GB", "intra-node GB",
          "local %", "max/mean load", "worst layer", "est. a2a ms");
  row("contiguous", plan.before);
  row("placed", plan.after);
  appendf(out, "%-12s %14.4g %14s %9s %13s %12s %14s\n", "lower bound",
          plan.inter_node_bytes_lower_bound / 1e9, "-", "-", "-", "-", "-");
  auto change = [](double now, double was) { return was > 0 ? 100.0 * (now / was - 1) : 0.0; };
  appendf(out, "\ninter-node bytes %+.1f%% (lower bound %+.1f%%), est. all-to-all time %+.1f%%\n",
          change(plan.after.total.inter_node_bytes, plan.before.total.inter_node_bytes),
          change(plan.inter_node_bytes_lower_bound, plan.before.total.inter_node_bytes),
          change(plan.after.total.seconds, plan.before.total.seconds));
  out +=
      "(max/mean load: sum over layers of the busiest rank's token-expert pairs over the mean; "
      "lower bound: exact optimum without the load constraint)\n";

  if (per_layer) {
    const double pair_bytes =
        2.0 * static_cast<double>(plan.traffic.hidden) * plan.traffic.bytes_per_element;
    appendf(out, "\n%5s %16s %16s %16s %12s %12s %12s %12s  %s\n", "layer", "inter GB before",
            "inter GB after", "inter GB bound", "load before", "load after", "ms before",
            "ms after", "start");
    for (int l = 0; l < plan.layers; ++l) {
      const LayerTraffic& b = plan.before.layers[l];
      const LayerTraffic& a = plan.after.layers[l];
      const LayerPlacement& p = plan.placed.layers[l];
      appendf(out, "%5d %16.4g %16.4g %16.4g %12.3f %12.3f %12.3f %12.3f  %s%s\n", l,
              b.inter_node_bytes / 1e9, a.inter_node_bytes / 1e9,
              p.inter_node_lower_bound * pair_bytes / 1e9, b.imbalance(), a.imbalance(),
              b.seconds * 1e3, a.seconds * 1e3, p.start.c_str(),
              p.balance_met ? "" : (p.balance_infeasible ? " (infeasible)" : " (not met)"));
    }
  }
  return out;
}

json expert_plan_json(const ExpertPlan& plan) {
  json j = expert_placement_json(plan.placed.placement);
  auto summary = [](const LayerTraffic& t) {
    return json{{"inter_node_bytes", t.inter_node_bytes},
                {"intra_node_bytes", t.intra_node_bytes},
                {"max_over_mean_load", t.imbalance()},
                {"all_to_all_seconds", t.seconds}};
  };
  j["traffic"] = {{"contiguous", summary(plan.before.total)},
                  {"placed", summary(plan.after.total)},
                  {"inter_node_bytes_lower_bound", plan.inter_node_bytes_lower_bound},
                  {"hidden", plan.traffic.hidden},
                  {"dtype", plan.dtype},
                  {"tolerance", plan.options.tolerance},
                  {"load", plan.load_source}};
  j["topology"] = plan.topology.to_json();
  return j;
}

}  // namespace trex::parallel
