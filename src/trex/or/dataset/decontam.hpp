#pragma once
// Benchmark decontamination by word n-gram overlap. The overlap of a text with
// one benchmark question is the fraction of the question's distinct word
// n-grams (lower-cased alphanumeric words) that also occur in the text; a
// record's score is the maximum over every question of every benchmark file.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace trex::orlib {

constexpr int kDecontamNgram = 8;
constexpr double kDecontamThreshold = 0.2;

std::vector<std::string> words_of(const std::string& text);

class NgramIndex {
 public:
  explicit NgramIndex(int n = kDecontamNgram) : n_(n) {}
  // Adds every `question` of the JSONL files in `dir` (files named *.jsonl).
  void add_directory(const std::string& dir);
  void add_question(const std::string& source, const std::string& question);

  struct Overlap {
    double fraction = 0.0;  // max over questions
    std::string source;     // the question's "file:line" ("" when no overlap)
  };
  Overlap max_overlap(const std::string& text) const;
  size_t questions() const { return totals_.size(); }
  size_t files() const { return files_; }

 private:
  std::vector<uint64_t> grams(const std::string& text) const;

  int n_;
  size_t files_ = 0;
  std::unordered_map<uint64_t, std::vector<uint32_t>> postings_;
  std::vector<uint32_t> totals_;
  std::vector<std::string> sources_;
};

}  // namespace trex::orlib
