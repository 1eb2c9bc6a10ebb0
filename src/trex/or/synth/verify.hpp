#pragma once
// Builds and verifies one problem instance: generate -> render the three
// representations -> translate the MathProg model -> solve with GLPK and CBC ->
// compare -> check both solutions with the family's own checker -> reject
// trivial optima. Only instances that pass everything become records.
#include <cstdint>
#include <string>

#include "trex/or/families/family.hpp"

namespace trex::orlib {

struct SynthSettings {
  uint64_t seed = 1;
  // Fixed difficulty, or mixed (each instance draws easy/medium/hard).
  bool mixed_difficulty = true;
  Difficulty difficulty = Difficulty::medium;
  double time_limit_seconds = 20.0;
  double side_constraint_rate = 0.35;
  // Wall-clock solve times vary between runs; with `record_timings` off the
  // records carry null seconds so that the same seed gives a byte-identical file.
  bool record_timings = true;
};

struct VerifyOutcome {
  bool accepted = false;
  std::string reject_reason;  // short code: "glpk_infeasible", "disagree", "trivial", ...
  std::string detail;         // human-readable explanation of a rejection
  std::string record;         // serialised JSON record (accepted only)
  uint64_t nl_hash = 0;       // hash of the normalised NL text
  double glpk_seconds = 0.0;
  double cbc_seconds = 0.0;
};

constexpr const char* kGeneratorVersion = "trex-or-synth/2";  // 2: composed word problems

// Agreement rule between two objective values: |a-b| <= 1e-6 * max(1, |a|).
bool objectives_agree(double a, double b);

// Lower-cases and collapses whitespace; the key for NL de-duplication.
std::string normalize_text(const std::string& text);

// Deterministic: the same (family, index, attempt, settings) always gives the
// same outcome (up to solver time limits).
VerifyOutcome build_and_verify(const Family& family, int64_t index, int attempt,
                               const SynthSettings& settings);

std::string record_id(const Family& family, uint64_t seed, int64_t index);

}  // namespace trex::orlib
