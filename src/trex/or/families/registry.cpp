// The list of problem families. Each family lives in its own file and exposes
// a `const Family& <name>_family()` accessor declared in family_list.hpp.
#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/families/family_list.hpp"

namespace trex::orlib {

const std::vector<const Family*>& all_families() {
  static const std::vector<const Family*> families = [] {
    std::vector<const Family*> v;
    // --- group A (LP and network families) ---
    v.push_back(&knapsack_family());
    v.push_back(&product_mix_family());
    v.push_back(&diet_family());
    v.push_back(&transportation_family());
    v.push_back(&assignment_family());
    v.push_back(&portfolio_family());
    // --- end group A ---
    // --- group B ---
    v.push_back(&min_cost_flow_family());
    v.push_back(&shortest_path_family());
    v.push_back(&max_flow_family());
    v.push_back(&fixed_charge_network_family());
    v.push_back(&set_cover_family());
    v.push_back(&unit_commitment_family());
    // --- end group B ---
    // --- group C ---
    v.push_back(&bin_packing_family());
    v.push_back(&facility_location_family());
    v.push_back(&p_median_family());
    v.push_back(&cutting_stock_family());
    v.push_back(&logical_transport_family());
    // --- end group C ---
    // --- group D ---
    v.push_back(&lot_sizing_family());
    v.push_back(&shift_scheduling_family());
    v.push_back(&job_shop_family());
    v.push_back(&tsp_family());
    v.push_back(&cvrp_family());
    // --- end group D ---
    // --- group E ---
    v.push_back(&production_inventory_family());
    v.push_back(&investment_allocation_family());
    // --- end group E ---
    return v;
  }();
  return families;
}

const Family& find_family(std::string_view name) {
  std::vector<std::string> names;
  for (const Family* f : all_families()) {
    if (f->name() == name) return *f;
    names.emplace_back(f->name());
  }
  throw Error("unknown problem family '" + std::string(name) + "'; known: " + join(names, ", "))
      .field("families");
}

std::vector<const Family*> parse_family_list(std::string_view list) {
  if (list == "all") return all_families();
  std::vector<const Family*> out;
  for (const auto& part : split(list, ',')) {
    std::string name = trim(part);
    if (name.empty()) continue;
    const Family* f = &find_family(name);
    for (const Family* seen : out)
      if (seen == f) throw Error("family '" + name + "' listed twice").field("families");
    out.push_back(f);
  }
  if (out.empty()) throw Error("no families given").field("families");
  return out;
}

}  // namespace trex::orlib
