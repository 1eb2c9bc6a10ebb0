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
  auto g = grams(question);
  if (g.empty()) return;
  uint32_t id = static_cast<uint32_t>(totals_.size());
  totals_.push_back(static_cast<uint32_t>(g.size()));
  sources_.push_back(source);
  for (uint64_t h : g) postings_[h].push_back(id);
}

void NgramIndex::add_directory(const std::string& dir) {
  require(std::filesystem::is_directory(dir), "benchmark directory not found: " + dir);
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".jsonl") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    ++files_;
    std::string name = std::filesystem::path(path).filename().string();
    read_jsonl(path, [&](const json& r, long line) {
      if (r.contains("question") && r["question"].is_string())
        add_question(name + ":" + std::to_string(line), r["question"].get<std::string>());
    });
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

}  // namespace trex::orlib
