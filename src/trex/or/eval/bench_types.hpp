#pragma once
// Problem types of benchmark questions: a keyword-rule classifier that maps a
// question's text to the kind of optimisation model it asks for (product mix,
// blending, transportation, ...), the problem families that generate each
// type, and the per-type counts over a seeded sample of benchmark files
// (`trex or bench-types`). The rules were written against the wording of
// NL4Opt, MAMO, IndustryOR, OptMATH and ComplexOR; docs/results/bench-types.md
// has the measured table and the hand-checked accuracy.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace trex::orlib::eval {

struct ProblemType {
  std::string id;                     // "production_inventory"
  std::string title;                  // "Multi-period production with inventory"
  std::vector<std::string> families;  // generated families of this type; empty: none
};

// Every type, in report order; the last is "other".
const std::vector<ProblemType>& problem_types();
// Looks a type up by id; throws trex::Error for an unknown id.
const ProblemType& problem_type(std::string_view id);

// The type of one question (an id of problem_types()). Rules add weights for
// cues found in the text; the highest total of at least 2 wins (ties go to the
// more specific type); below that, a text with an optimisation goal is a plain
// resource allocation, anything else "other".
std::string classify_question(std::string_view question);

// Each type's rule total for the question, for explaining a classification.
std::vector<std::pair<std::string, int>> question_type_scores(std::string_view question);

struct BenchTypesOptions {
  std::string bench_dir = "../shared/or_bench";
  std::vector<std::string> files = {"nl4opt_sirl",
                                    "mamo_easylp_sirl_fixed",
                                    "mamo_complexlp_sirl_fixed",
                                    "industryor_sirl_fixedv2",
                                    "optmath_bench",
                                    "complexor"};  // file stems under bench_dir
  int64_t sample = 200;  // items drawn from all files together; 0 or more than there are: all
  uint64_t seed = 1;
};

// Classifies the sample and returns {"files": [{name, items, sampled}], "items",
// "sample", "seed", "types": [{id, title, count, share, all_count, families,
// covered}] (most frequent first), "covered_share", "uncovered": [ids],
// "classified": [{file, id, type}] (the sampled items, for checking by hand)}.
// `all_count` counts the type over every item of the files, not just the sample.
nlohmann::json bench_types_report(const BenchTypesOptions& options);
// The report as a text table.
std::string format_bench_types(const nlohmann::json& report);

}  // namespace trex::orlib::eval
