#pragma once
// `trex or cpt`: the OR continued-pretraining corpus. Documents (JSONL
// {"text", "meta"}) of six kinds: family expositions, worked examples (one
// instance in all three representations with the verified solver results),
// LP-file literacy, MathProg language material (including the GLPK example
// models, GPL-3+), solver status semantics, and error -> fix narratives whose
// GLPK messages come from solving the faulty models in worker processes.
// Exact and near-duplicate documents are removed. See docs/or-datasets.md.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trex/or/dataset/collected.hpp"
#include "trex/or/dataset/sft.hpp"

namespace trex::orlib {

struct CptOptions {
  std::string problems_path;
  std::string out_dir;
  uint64_t seed = 1;
  std::string glpk_examples_dir = "/usr/share/doc/glpk-utils/examples";
  int jobs = 2;  // worker processes for the error narratives; 0 = in-process
  int narratives_per_problem = 2;
  double time_limit_seconds = 10.0;
  double near_duplicate_jaccard = 0.8;
  bool strict = false;  // the first bad line of the problems file is an error
  // Benchmark questions (*.jsonl with "question") every document is checked
  // against (decontam.hpp: word 8-grams above decontam_threshold, or a number
  // signature); a match is dropped and counted. "": no decontamination.
  std::string bench_dir;
  double decontam_threshold = 0.2;
  // Collected solver documentation (collected.hpp); a source whose directory
  // is missing contributes nothing and is reported as not installed.
  std::vector<CollectedSource> collected_sources = default_collected_sources();
  // An HF tokenizer.json whose token counts the manifest reports next to bytes;
  // "": tokens stated as bytes/4.
  std::string tokenizer_path;
};

struct CptKindStats {
  int64_t documents = 0;
  int64_t bytes = 0;
  int64_t tokens = -1;  // by CptOptions::tokenizer_path; -1 without one
};

// One source of the corpus manifest: where its kept documents came from,
// under which licence, and how many of them.
struct CptSourceStats {
  std::string package, license, copyright;
  int64_t files = 0;      // collected sources: pages read
  int64_t too_short = 0;  // collected sources: pages with too little text
  bool installed = true;  // collected sources: the package's directory exists
  int64_t failed = 0;     // collected sources: files that could not be read or converted
  std::vector<std::string> errors = {};
  int64_t documents = 0;  // kept (after de-duplication and decontamination)
  int64_t bytes = 0;
  int64_t tokens = -1;  // by CptOptions::tokenizer_path; -1 without one
};

struct CptSummary {
  std::map<std::string, CptKindStats> kinds;      // kept documents by kind
  std::map<std::string, CptSourceStats> sources;  // by meta.source
  int64_t documents = 0;
  int64_t bytes = 0;
  int64_t tokens = -1;        // by CptOptions::tokenizer_path; -1 without one
  std::string token_measure;  // what "tokens" counts
  int64_t exact_duplicates = 0;
  int64_t near_duplicates = 0;
  int64_t narratives_rejected = 0;       // fault did not change the outcome or hit a limit
  size_t bench_questions = 0;            // indexed from bench_dir
  int64_t decontam_dropped = 0;          // by word n-gram overlap
  int64_t decontam_numbers_dropped = 0;  // by number signature
  double seconds = 0.0;
  JsonlStats input;  // the problems file: lines read, skipped, repaired
};

struct CptDocument {
  std::string kind;
  std::string text;
  json meta;
};

CptSummary build_cpt(const CptOptions& options);
std::string format_cpt_summary(const CptSummary& summary);

// Removes exact duplicates (normalised text) and near duplicates (MinHash over
// word 5-grams, estimated Jaccard >= threshold against an earlier document),
// keeping the first. Returns the two counts.
std::pair<int64_t, int64_t> deduplicate(std::vector<CptDocument>& docs, double jaccard);

// Document builders (no solver calls).
CptDocument family_document(const std::string& family, const std::vector<const Problem*>& examples);
CptDocument worked_example(const Problem& p, const json& record);
CptDocument lp_literacy(const Problem& p, const std::string& lp);
std::vector<CptDocument> reference_documents();

}  // namespace trex::orlib
