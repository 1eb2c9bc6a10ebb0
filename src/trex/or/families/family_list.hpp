#pragma once
// Accessors for every problem family (one per file in this folder).
#include "trex/or/families/family.hpp"

namespace trex::orlib {

// --- group A ---
const Family& knapsack_family();
// --- end group A ---
// --- group B ---
// --- end group B ---
// --- group C ---
// --- end group C ---
// --- group D ---
// --- end group D ---

}  // namespace trex::orlib
