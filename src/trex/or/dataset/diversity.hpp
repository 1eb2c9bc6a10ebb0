#pragma once
// Surface-form diversity of problem texts: the share of distinct word n-grams
// among all word n-grams of a sample of texts ("distinct-n"; words as
// decontamination reads them: lower-cased alphanumeric runs). Text generated
// from a few templates repeats its n-grams and scores low; varied human
// writing scores high. The share falls as the sample grows, so sets are
// compared on samples of the same size (kDiversitySample texts, drawn by seed).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trex::orlib {

constexpr int kDiversityNgram = 4;
constexpr size_t kDiversitySample = 200;

struct NgramDiversity {
  int64_t texts = 0;     // in the sample
  int64_t total = 0;     // word n-grams
  int64_t distinct = 0;  // distinct word n-grams
  double share() const { return total > 0 ? static_cast<double>(distinct) / total : 0.0; }
};

// Distinct / total word n-grams over a sample of up to `sample` of `texts`
// (all of them when there are fewer; otherwise drawn without replacement by `seed`).
NgramDiversity ngram_diversity(const std::vector<std::string>& texts, uint64_t seed,
                               int n = kDiversityNgram, size_t sample = kDiversitySample);

// The same figure for every benchmark file of `dir` (*.jsonl, their "question"
// fields), keyed by file stem; files without questions are left out.
std::map<std::string, NgramDiversity> benchmark_diversity(const std::string& dir, uint64_t seed);

// The report's form of the figures: {"ngram", "sample", "families": {name:
// {"texts", "ngrams", "distinct", "share", "templates"}}, "benchmarks": {stem:
// {...}}}; `templates` gives each family's count of distinct NL templates.
nlohmann::json diversity_json(const std::map<std::string, NgramDiversity>& families,
                              const std::map<std::string, int64_t>& templates,
                              const std::map<std::string, NgramDiversity>& benchmarks);

}  // namespace trex::orlib
