#pragma once
// `trex or sft`: the chat SFT set built from `trex or synth` records. Four task
// categories (formulate, translate, repair, interpret) over three
// representations (nl, alg, gmpl); every model that appears in an assistant
// message is re-solved with GLPK in a worker process and must match the
// answer in `meta`; every injected fault is verified faulty. See
// docs/or-datasets.md and docs/or-answer-format.md.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trex/core/jsonl.hpp"
#include "trex/or/dataset/diversity.hpp"

namespace trex::orlib {

using json = nlohmann::json;

// One `trex or synth` record (the fields the SFT builder uses).
struct Problem {
  std::string id;
  std::string family;
  std::string problem_class;
  std::string difficulty;
  int nl_template = 0;
  std::string surface_form;  // wording apart from names and numbers (Instance::surface_form)
  std::string nl, alg, gmpl;
  double objective = 0.0;
  json size;
  std::vector<std::string> variants;
};
Problem parse_problem(const json& record);
// Reads a `trex or synth` problems file. A bad line (invalid JSON, not a synth
// record, not optimal) is fatal with `read.strict` (the default here), else
// skipped and counted in `*stats` (when given). No problems at all is an error.
std::vector<Problem> load_problems(const std::string& path,
                                   const JsonlOptions& read = strict_jsonl(),
                                   JsonlStats* stats = nullptr);

// The system prompt of every record, and the answer line format.
extern const char* const kSftSystemPrompt;
std::string answer_value(double objective);    // "%.10g"
std::string objective_line(double objective);  // "Optimal objective: <v>"

struct SftOptions {
  std::string problems_path;
  int64_t n = 10000;
  uint64_t seed = 1;
  std::string out_dir;
  std::string bench_dir = "../shared/or_bench";  // "" disables decontamination
  double decontam_threshold = 0.2;
  int jobs = 1;  // worker processes; 0 = in-process
  int heldout_families = 2;
  double time_limit_seconds = 20.0;
  int max_attempts = 200;
  bool show_progress = true;
  bool strict = false;  // the first bad line of the problems file is an error
};

struct SftSummary {
  int64_t written = 0;
  double seconds = 0.0;
  std::map<std::string, int64_t> rejected;  // reason -> count (all retried)
  int64_t duplicates = 0;
  int64_t decontam_dropped = 0;          // by word n-gram overlap
  int64_t decontam_numbers_dropped = 0;  // by number signature (decontam.hpp)
  std::map<std::string, int64_t> split_sizes;
  std::vector<std::string> heldout_families;
  std::map<std::string, int> heldout_templates;  // family -> template id
  size_t bench_questions = 0;
  size_t bench_signed_questions = 0;  // with a number signature
  size_t bench_files = 0;
  JsonlStats input;  // the problems file: lines read, skipped, repaired
  // Surface forms of the problems' NL per family (distinct templates, word
  // 4-gram diversity; diversity.hpp) and of each benchmark file's questions.
  std::map<std::string, TextForms> family_forms;
  std::map<std::string, NgramDiversity> family_diversity, bench_diversity;
};

// Builds the set and writes <out>/{train,valid,test,heldout_template,
// heldout_family}.jsonl, <out>/summary.json and the dataset card <out>/README.md.
SftSummary build_sft(const SftOptions& options);

// Task categories and planned shares.
struct TaskPlan {
  std::string task;
  double share;
};
const std::vector<TaskPlan>& sft_task_plan();
// The task of each of n samples: exact counts from the shares, shuffled by seed.
std::vector<std::string> plan_tasks(int64_t n, uint64_t seed);

// Split of a problem: "heldout_family", "heldout_template", "train", "valid" or "test".
std::string split_for(const Problem& p, uint64_t seed,
                      const std::vector<std::string>& heldout_families,
                      const std::map<std::string, int>& heldout_templates);
std::vector<std::string> choose_heldout_families(uint64_t seed, int count);
std::map<std::string, int> choose_heldout_templates(uint64_t seed);

// Builds sample `index` (attempt `attempt`) of `task`. Calls GLPK: run it in a
// worker process. Returns the serialised record, or "!reason: detail".
std::string make_sample(const std::vector<Problem>& problems, const std::string& task,
                        int64_t index, int attempt, uint64_t seed, double time_limit_seconds);

// Markdown dataset card from the written records.
std::string dataset_card(const std::map<std::string, std::vector<json>>& splits,
                         const SftSummary& summary, const SftOptions& options,
                         const std::vector<double>& overlaps);

}  // namespace trex::orlib
