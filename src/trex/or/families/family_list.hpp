#pragma once
// Accessors for every problem family (one per file in this folder).
#include "trex/or/families/family.hpp"

namespace trex::orlib {

// --- group A ---
const Family& knapsack_family();
const Family& product_mix_family();
const Family& diet_family();
const Family& transportation_family();
const Family& assignment_family();
const Family& portfolio_family();
// --- end group A ---
// --- group B ---
const Family& min_cost_flow_family();
const Family& shortest_path_family();
const Family& max_flow_family();
const Family& fixed_charge_network_family();
const Family& set_cover_family();
const Family& unit_commitment_family();
// --- end group B ---
// --- group C ---
const Family& bin_packing_family();
const Family& facility_location_family();
const Family& p_median_family();
const Family& cutting_stock_family();
const Family& logical_transport_family();
// --- end group C ---
// --- group D ---
const Family& lot_sizing_family();
const Family& shift_scheduling_family();
const Family& job_shop_family();
const Family& tsp_family();
const Family& cvrp_family();
// --- end group D ---
// --- group E ---
const Family& production_inventory_family();
const Family& investment_allocation_family();
// --- end group E ---

}  // namespace trex::orlib
