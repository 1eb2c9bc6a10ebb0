#pragma once
// Benchmark decontamination, two ways:
// - word n-grams: the overlap of a text with one benchmark question is the
//   fraction of the question's distinct word n-grams (lower-cased alphanumeric
//   words) that also occur in the text; a record's score is the maximum over
//   every question of every benchmark file;
// - number signatures: a question's signature is the set of its distinct
//   numbers other than the small integers 0..10 (thousands separators, trailing
//   decimal zeros and "%" normalised away); when it has at least
//   kSignatureMinNumbers of them, a text that contains kSignatureShare of them
//   matches it — a paraphrase of the same instance keeps its numbers even when
//   every word changes.
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

std::vector<std::string> words_of(const std::string& text);
// The numbers of a text, normalised ("1,200" -> "1200", "3.50" -> "3.5",
// "15%" -> "15"), in order of appearance, repeats kept.
std::vector<std::string> numbers_of(const std::string& text);
// The distinct numbers of `text` that can identify an instance (not 0..10).
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
  // the questions with at least kSignatureMinNumbers signature numbers.
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
