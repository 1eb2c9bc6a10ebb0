#pragma once
// `trex or synth`: many verified instances, produced by a pool of worker
// processes (GLPK and CBC keep global state and may abort on internal errors,
// so each worker is a separate process; a crashed worker is replaced and the
// instance it was on is retried). Records are written in index order, so the
// output depends only on the seed, never on scheduling.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "trex/or/synth/verify.hpp"

namespace trex::orlib {

struct SynthRequest {
  int64_t count = 100;                  // records in the whole (unsharded) run
  std::vector<const Family*> families;  // round-robin by index
  SynthSettings settings;
  int shard_index = 0;  // this run writes indices [lo, hi) of shard i/k
  int shard_count = 1;
  int jobs = 1;            // worker processes; 0 = in this process
  int max_attempts = 200;  // per index, before giving up with an error
  bool show_progress = true;
};

struct FamilyStats {
  int64_t accepted = 0;
  std::map<std::string, int64_t> rejected;  // reason -> count
  std::vector<double> glpk_seconds;         // accepted instances
  std::vector<double> cbc_seconds;
  std::string example_rejection;  // first rejection detail, for diagnosis
};

struct SynthSummary {
  int64_t first_index = 0;
  int64_t end_index = 0;
  int64_t written = 0;
  int64_t duplicates = 0;
  double seconds = 0.0;
  std::map<std::string, FamilyStats> families;  // by family name
};

// Runs the request and calls `sink(record_json)` for each accepted record in
// index order.
SynthSummary run_synth(const SynthRequest& request,
                       const std::function<void(const std::string&)>& sink);

// Index range [lo, hi) of shard i of k over n items.
std::pair<int64_t, int64_t> shard_range(int64_t n, int shard_index, int shard_count);

// Per-family table: accepted, rejected by reason, median solve times.
std::string format_summary(const SynthSummary& summary);
nlohmann::json summary_json(const SynthSummary& summary);

double median(std::vector<double> values);

}  // namespace trex::orlib
