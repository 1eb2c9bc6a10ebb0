#pragma once
// Text, JSON and SVG renderings of planner estimates.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/plan/planner.hpp"

namespace trex::plan {

// One line per estimate: layout, memory, step time, tokens/s/device, TFLOP/s, MFU.
std::string format_estimates(const std::vector<Estimate>& estimates);
// Memory and time breakdown of one estimate (`--explain`).
std::string explain(const Estimate& estimate, const ModelShape& model, const ClusterSpec& cluster,
                    const Job& job);
nlohmann::json estimate_json(const Estimate& estimate);
// Scatter of every candidate: memory per device (x) vs MFU (y), the HBM limit
// as a vertical line, the best layouts highlighted.
std::string candidates_svg(const SearchResult& result, const ClusterSpec& cluster,
                           const std::string& title);

// Memory and time of the top layouts side by side (rows: categories).
std::string format_side_by_side(const std::vector<Estimate>& estimates);
// The same as stacked bars (time per step and memory per device) in SVG.
std::string side_by_side_svg(const std::vector<Estimate>& estimates, double hbm_gib,
                             const std::string& title);

}  // namespace trex::plan
