#pragma once
// The data of `trex demo`: a small, copy-friendly SFT set,
// a CPT corpus and evaluation splits for a ~5-20M-parameter model trained from
// scratch on two CPU cores. A scouting run showed that such a model writes the
// fixed model text perfectly but never learns to copy numbers, so the targets
// here are compact (model text + a `data;` section whose values follow the
// order of the question text) and the prompts are short. See docs/demo.md.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "trex/or/dataset/diversity.hpp"

namespace trex::demo {

using json = nlohmann::json;

// Sizes of one preset (`default`: a <= 20-minute demo; `full`: hours).
struct DemoSizes {
  int64_t sft_train = 0;         // formulate chat records for training
  int64_t sft_val = 0;           // chat records for validation loss / Pass@1
  int64_t test = 0;              // same families and templates, unseen instances
  int64_t heldout_template = 0;  // a phrasing never trained, per family
  int64_t heldout_family = 0;    // families never trained
  int64_t public_items = 0;      // slice of ../shared/or_bench
  int64_t cpt_problems = 0;      // problems whose texts make the CPT corpus (>= sft_train)
  double side_constraint_rate = 0.0;
  size_t max_chars = 0;  // prompt + target chars of trained items (held-out: 2x); 0: any
  int copy_drills = 0;   // CPT copy drills per trained problem (copy_drills())
  // Share of the trained problems (SFT train, CPT-only) whose named entities
  // are renamed (or/dataset/entity_names.hpp); evaluated problems never are.
  double renamed_share = 0.0;
};
DemoSizes demo_preset_sizes(std::string_view preset);  // "default" | "full"; throws trex::Error

struct DemoDataOptions {
  std::string out_dir;
  std::string preset = "default";
  DemoSizes sizes = demo_preset_sizes("default");
  uint64_t seed = 1;
  std::vector<std::string> train_families;    // empty: the preset's list (docs/demo.md)
  std::vector<std::string> heldout_families;  // empty: the default list
  std::string difficulty = "easy";
  std::string bench_dir = "../shared/or_bench";  // "" or public_items == 0: no public slice
  std::vector<std::string> public_files;         // benchmark file stems; empty: the default list
  // Drop trained-family problems that match a question of any benchmark in
  // bench_dir (word 8-gram overlap >= 0.2 of the question, or >= 90 % of its
  // number signature; or/dataset/decontam.hpp) and measure the SFT set's
  // overlap; indexing every benchmark file costs ~1 s.
  bool decontaminate = true;
  int jobs = 1;  // worker processes for GLPK; 0 = in-process
  double time_limit_seconds = 20.0;
  bool show_progress = true;
};

const std::vector<std::string>& demo_default_train_families(std::string_view preset);
const std::vector<std::string>& demo_default_heldout_families();
const std::vector<std::string>& demo_default_public_files();

struct DemoDataSummary {
  std::map<std::string, int64_t> split_sizes;  // sft_train, sft_val, test, heldout_template, ...
  int64_t cpt_documents = 0;
  int64_t cpt_bytes = 0;
  int64_t problems_generated = 0;  // synth records read
  int64_t skipped_long = 0;        // over max_chars
  int64_t skipped_duplicate = 0;   // same question or target as an earlier instance
  int64_t unused = 0;              // generated but not needed (quota already full)
  int64_t verified_solves = 0;     // compact targets re-solved to the recorded optimum
  std::vector<std::string> train_families, heldout_families;
  std::map<std::string, int> heldout_templates;  // family -> template never trained
  // Mean fraction of data values that appear in the question text in the same
  // order, per family: the family's own data section vs the demo's reordered one.
  std::map<std::string, double> order_before, order_after;
  double mean_prompt_chars = 0.0, mean_target_chars = 0.0;
  size_t max_total_chars = 0;
  double max_bench_overlap = 0.0;  // SFT train vs ../shared/or_bench (word 8-grams)
  int64_t decontam_questions = 0;  // benchmark questions indexed (0: not decontaminated)
  int64_t decontam_ngram = 0;      // trained problems dropped by word 8-gram overlap
  int64_t decontam_signature = 0;  // ... by their number signature
  // Question surface forms of the SFT train set per family and of each
  // benchmark file (or/dataset/diversity.hpp; benchmarks only when decontaminating).
  std::map<std::string, orlib::TextForms> family_forms;
  std::map<std::string, orlib::NgramDiversity> family_diversity, bench_diversity;
  std::vector<std::string> public_sources;  // "file:id" of the public slice
  std::map<std::string, int64_t> renamed;   // renamed trained problems per NameSource
  int64_t renamed_skipped = 0;              // drawn for renaming, not renamable cleanly
  double seconds = 0.0;
  json to_json() const;
};

// Builds everything into options.out_dir (see docs/demo.md for the files).
DemoDataSummary build_demo_data(const DemoDataOptions& options);

// The user message of every demo prompt (SFT and generation alike).
std::string demo_user_prompt(const std::string& question);

// The compact assistant target for a `trex or synth` record: the family's model
// (without `solve;` and the print statement, which the harness does not need)
// and a data section reordered to follow the question text.
struct CompactTarget {
  std::string text;           // the whole assistant message (one ```mathprog block)
  std::string model;          // the complete GMPL model it holds
  double order_before = 0.0;  // in-order fraction of the family's data section
  double order_after = 0.0;   // in-order fraction of the reordered section
};
CompactTarget compact_target(const std::string& question, const std::string& gmpl);

// Numbers of a question text in order ("1,250" -> 1250, "75%" -> 75; digits glued
// to letters, as in "P1", are not numbers).
std::vector<double> text_numbers(const std::string& text);
// The same numbers with where they stand in the text ([begin, end), a leading
// minus included) and as the data section writes them ("1,250" -> "1250").
struct TextNumber {
  size_t begin = 0, end = 0;
  std::string digits;
  double value = 0.0;
};
std::vector<TextNumber> text_number_spans(const std::string& text);
// Copy drills for the CPT corpus: `count` short spans of `question` (1-3
// consecutive sentences or lines that hold a value), each followed by the line
// "in order: " and the span's set elements (as the data section spells them,
// from `data_section`) and numbers in the order the span gives them: the SFT
// copy on spans of ~20-80 tokens. Measured not to make the copy form earlier
// (docs/demo.md, "Copy drills"), so both presets use none.
std::vector<std::string> copy_drills(const std::string& question, const std::string& data_section,
                                     int count, uint64_t seed);
// Rewrites a GMPL data section (the text between `data;` and `end;`) so that its
// values follow the order of `numbers`: 2-D tables may be transposed with (tr),
// statements are ordered by where their values occur, and 1-D parameters over
// the same keys are merged into one table when the text lists them per key.
std::string reorder_data_section(const std::string& data, const std::vector<double>& numbers);
// The numeric values of a data section in the order written (set elements and
// keys excluded).
std::vector<double> data_section_values(const std::string& data);
// Fraction of `values` matched, in order, by a greedy scan of `numbers`.
double in_order_fraction(const std::vector<double>& values, const std::vector<double>& numbers);

}  // namespace trex::demo
