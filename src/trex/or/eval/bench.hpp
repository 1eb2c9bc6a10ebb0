#pragma once
// Benchmark files (the normalised schema of shared/or_bench) and completion
// files, and how completions are joined to benchmark items.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/core/jsonl.hpp"
#include "trex/or/eval/grade.hpp"

namespace trex::orlib::eval {

struct BenchItem {
  std::string id;      // the record's id as text (integers without ".0")
  std::string source;  // the record's `source` field ("" when absent)
  std::string question;
  std::string problem_type;  // "" when null or absent
  GroundTruth truth;
};

struct Benchmark {
  std::string name;  // file stem
  std::string path;
  std::vector<BenchItem> items;
  bool has_types = false;  // some item has a problem_type
  JsonlStats read;         // lines read, skipped and repaired
};

// Reads each file (JSONL; errors name the file and line). A bad line (invalid
// JSON, not an object, a duplicate id) is fatal with `read.strict` (the
// default here), else skipped and counted in Benchmark::read. Items without an
// id are numbered by their position among the file's non-blank lines.
std::vector<Benchmark> load_benchmarks(const std::vector<std::string>& paths,
                                       bool sentinel_as_unknown = false,
                                       const JsonlOptions& read = strict_jsonl());

// An id value as text: strings as they are, integral numbers without ".0".
std::string id_text(const nlohmann::json& value);

// samples[b][i]: the completions for item i of benchmark b, in file order.
using SampleTable = std::vector<std::vector<std::vector<std::string>>>;

struct JoinStats {
  int64_t records = 0;
  int64_t samples = 0;
  int64_t by_id = 0;
  int64_t by_question = 0;
  int64_t unmatched = 0;
  int64_t ambiguous = 0;
  std::vector<std::string> examples;  // a few "line N: why" for unmatched/ambiguous records
  JsonlStats read;                    // lines read, skipped (no completion field, invalid JSON)
                                      // and repaired
};

// Completion records: {"id", "completion"} or {"id", "completions": [...]},
// optionally "source" (benchmark file stem or record source) to disambiguate;
// also the field names of common eval dumps (see docs/or-eval.md): ids under
// idx/index/problem_id/question_id/task_id, texts under response(s), output(s),
// generation(s), generated_text, model_output, prediction(s), text, OpenAI
// `choices`, chat `messages`; records without ids are joined on the question
// (question/en_question/problem/prompt/instruction/input), exactly or by the
// longest benchmark question the text contains.
// A bad line is fatal with `read.strict` (the default here), else skipped and
// counted in stats.read.
SampleTable load_completions(const std::string& path, const std::vector<Benchmark>& benchmarks,
                             JoinStats& stats, const JsonlOptions& read = strict_jsonl());

}  // namespace trex::orlib::eval
