#pragma once
// Accessors for every problem family (one per file in this folder).
#include "trex/or/families/family.hpp"

namespace trex::orlib {

// --- group A ---
const Family& knapsack_family();
const Family& product_mix_family();
// --- end group A ---
// --- group B ---
const Family& min_cost_flow_family();
const Family& shortest_path_family();
// --- end group B ---
// --- group C ---
const Family& bin_packing_family();
const Family& facility_location_family();
// --- end group C ---
// --- group D ---
const Family& lot_sizing_family();
const Family& shift_scheduling_family();
// --- end group D ---

}  // namespace trex::orlib
