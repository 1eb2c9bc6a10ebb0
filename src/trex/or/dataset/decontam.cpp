#include "trex/or/dataset/decontam.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/rng.hpp"

namespace trex::orlib {

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c)) {
      word += static_cast<char>(std::tolower(c));
    } else if (!word.empty()) {
      out.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

std::vector<std::string> numbers_of(const std::string& text) {
  std::vector<std::string> out;
  const auto digit = [&](size_t i) {
    return i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
  };
  for (size_t i = 0; i < text.size();) {
    // A number starts at a digit that does not continue a word ("x1", "B2").
    if (!digit(i) || (i > 0 && std::isalpha(static_cast<unsigned char>(text[i - 1])))) {
      ++i;
      continue;
    }
    std::string whole;
    while (digit(i)) whole += text[i++];
    // Thousands separators: ",ddd" groups directly after the digits.
    while (i < text.size() && text[i] == ',' && digit(i + 1) && digit(i + 2) && digit(i + 3) &&
           !digit(i + 4)) {
      whole += text.substr(i + 1, 3);
      i += 4;
    }
    std::string fraction;
    if (i + 1 < text.size() && text[i] == '.' && digit(i + 1)) {
      ++i;
      while (digit(i)) fraction += text[i++];
      while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
    }
    while (whole.size() > 1 && whole[0] == '0') whole.erase(0, 1);
    out.push_back(fraction.empty() ? whole : whole + "." + fraction);
  }
  return out;
}

std::vector<std::string> number_signature(const std::string& text) {
  std::vector<std::string> out;
  for (std::string& n : numbers_of(text)) {
    const bool small_integer = n.find('.') == std::string::npos && n.size() <= 2;  // < 100
    if (!small_integer) out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<uint64_t> NgramIndex::grams(const std::string& text) const {
  auto words = words_of(text);
  std::vector<uint64_t> hashes(words.size());
  for (size_t i = 0; i < words.size(); ++i) hashes[i] = hash_string(words[i]);
  std::vector<uint64_t> out;
  const size_t n = static_cast<size_t>(n_);
  for (size_t i = 0; i + n <= hashes.size(); ++i) {
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    for (size_t k = 0; k < n; ++k) h = hash_combine(h, hashes[i + k]);
    out.push_back(h);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void NgramIndex::add_question(const std::string& source, const std::string& question) {
  const std::vector<std::string> signature = number_signature(question);
  if (signature.size() >= kSignatureMinNumbers) {
    const auto id = static_cast<uint32_t>(signature_sizes_.size());
    signature_sizes_.push_back(static_cast<uint32_t>(signature.size()));
    signature_sources_.push_back(source);
    for (const std::string& n : signature) number_postings_[n].push_back(id);
  }
  auto g = grams(question);
  if (g.empty()) return;
  uint32_t id = static_cast<uint32_t>(totals_.size());
  totals_.push_back(static_cast<uint32_t>(g.size()));
  sources_.push_back(source);
  for (uint64_t h : g) postings_[h].push_back(id);
}

std::map<std::string, std::vector<BenchmarkQuestion>> benchmark_questions(const std::string& dir) {
  require(std::filesystem::is_directory(dir), "benchmark directory not found: " + dir);
  std::map<std::string, std::vector<BenchmarkQuestion>> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".jsonl") continue;
    std::vector<BenchmarkQuestion>& questions = out[e.path().filename().string()];
    read_jsonl(e.path().string(), [&](const json& r, long line) {
      if (r.contains("question") && r["question"].is_string())
        questions.push_back({line, r["question"].get<std::string>()});
    });
  }
  return out;
}

void NgramIndex::add_directory(const std::string& dir) {
  for (const auto& [name, questions] : benchmark_questions(dir)) {
    ++files_;
    for (const BenchmarkQuestion& q : questions)
      add_question(name + ":" + std::to_string(q.line), q.text);
  }
}

NgramIndex::Overlap NgramIndex::max_overlap(const std::string& text) const {
  std::unordered_map<uint32_t, uint32_t> hits;
  for (uint64_t h : grams(text)) {
    auto it = postings_.find(h);
    if (it == postings_.end()) continue;
    for (uint32_t id : it->second) hits[id] += 1;
  }
  Overlap best;
  for (const auto& [id, count] : hits) {
    double f = static_cast<double>(count) / totals_[id];
    if (f > best.fraction ||
        (f == best.fraction && !best.source.empty() && sources_[id] < best.source)) {
      best.fraction = f;
      best.source = sources_[id];
    }
  }
  return best;
}

NgramIndex::Overlap NgramIndex::max_signature_share(const std::string& text) const {
  std::unordered_map<uint32_t, uint32_t> hits;
  const std::vector<std::string> own = number_signature(text);
  for (const std::string& n : own) {
    auto it = number_postings_.find(n);
    if (it == number_postings_.end()) continue;
    for (uint32_t id : it->second) hits[id] += 1;
  }
  Overlap best;
  for (const auto& [id, count] : hits) {
    if (static_cast<double>(count) < kSignatureDensity * static_cast<double>(own.size())) continue;
    const double f = static_cast<double>(count) / signature_sizes_[id];
    if (f > best.fraction ||
        (f == best.fraction && !best.source.empty() && signature_sources_[id] < best.source)) {
      best.fraction = f;
      best.source = signature_sources_[id];
    }
  }
  return best;
}

}  // namespace trex::orlib
