#pragma once
// Benchmark decontamination, two ways:
// - word n-grams: the overlap of a text with one benchmark question is the
//   fraction of the question's distinct word n-grams (lower-cased alphanumeric
//   words) that also occur in the text; a record's score is the maximum over
//   every question of every benchmark file;
// - number signatures: a question's signature is the set of its distinct
//   decimals and integers >= 100 (thousands separators, trailing decimal zeros
//   and "%" normalised away; smaller integers — counts, indices, days, small
//   round figures — are everywhere and identify nothing); when it has at least
//   kSignatureMinNumbers of them, a text matches it when it contains
//   kSignatureShare of them and they make at least kSignatureDensity of the
//   text's own signature numbers — a paraphrase of the same instance keeps its
//   numbers even when every word changes, while a long number-rich document
//   (a table, a model with its data) that holds a few of them by chance does
//   not match.
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace trex::orlib {

constexpr int kDecontamNgram = 8;
constexpr double kDecontamThreshold = 0.2;
constexpr size_t kSignatureMinNumbers = 5;
constexpr double kSignatureShare = 0.9;
constexpr double kSignatureDensity = 0.4;

std::vector<std::string> words_of(const std::string& text);
// The numbers of a text, normalised ("1,200" -> "1200", "3.50" -> "3.5",
// "15%" -> "15"), in order of appearance, repeats kept.
std::vector<std::string> numbers_of(const std::string& text);
// The distinct numbers of `text` that can identify an instance: decimals and
// integers >= 100.
std::vector<std::string> number_signature(const std::string& text);

// The "question" of every record of the benchmark files in `dir` (*.jsonl, in
// file-name order), keyed by file name, each in line order with its line.
struct BenchmarkQuestion {
  long line = 0;
  std::string text;
};
std::map<std::string, std::vector<BenchmarkQuestion>> benchmark_questions(const std::string& dir);

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
  // The largest share of a question's number signature found in `text`, over
  // the questions with at least kSignatureMinNumbers signature numbers whose
  // found numbers make at least kSignatureDensity of the text's signature.
  Overlap max_signature_share(const std::string& text) const;
  size_t questions() const { return totals_.size(); }
  size_t signed_questions() const { return signature_sizes_.size(); }
  size_t files() const { return files_; }

 private:
  std::vector<uint64_t> grams(const std::string& text) const;

  int n_;
  size_t files_ = 0;
  std::unordered_map<uint64_t, std::vector<uint32_t>> postings_;
  std::vector<uint32_t> totals_;
  std::vector<std::string> sources_;
  std::unordered_map<std::string, std::vector<uint32_t>> number_postings_;
  std::vector<uint32_t> signature_sizes_;
  std::vector<std::string> signature_sources_;
};

}  // namespace trex::orlib
