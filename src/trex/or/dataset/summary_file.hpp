#pragma once
// The summary.json that the SFT and CPT builders leave next to their output.
#include <nlohmann/json.hpp>
#include <string>

#include "trex/core/jsonl.hpp"

namespace trex::orlib {

// Writes <out_dir>/summary.json atomically: the builder's own `fields`, plus
// the run's time in seconds, the problems file it read and how reading it went.
void write_summary_file(const std::string& out_dir, nlohmann::json fields, double seconds,
                        const std::string& problems_path, const JsonlStats& input);

}  // namespace trex::orlib
