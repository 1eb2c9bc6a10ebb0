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
#include <set>
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

// How many wordings a family's texts use: its templates (story themes) and
// its surface forms (Instance::surface_form: the wording apart from names and
// numbers; one per template for a template family, up to one per text for a
// composed one).
struct TextForms {
  int64_t texts = 0;
  int64_t templates = 0;
  int64_t surface_forms = 0;
};
// Counts over (template, surface form) pairs of one family's texts.
class TextFormCounter {
 public:
  void add(int nl_template, const std::string& surface_form);
  TextForms counts() const;

 private:
  int64_t texts_ = 0;
  std::set<int> templates_;
  std::set<std::string> forms_;
};

// The report's form of the figures: {"ngram", "sample", "families": {name:
// {"texts", "ngrams", "distinct", "share", "all_texts", "templates",
// "surface_forms"}}, "benchmarks": {stem: {...}}}.
nlohmann::json diversity_json(const std::map<std::string, NgramDiversity>& families,
                              const std::map<std::string, TextForms>& forms,
                              const std::map<std::string, NgramDiversity>& benchmarks);

}  // namespace trex::orlib
