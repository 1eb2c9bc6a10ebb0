#include "trex/or/dataset/diversity.hpp"

#include <cmath>
#include <filesystem>
#include <numeric>
#include <unordered_set>

#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/or/dataset/decontam.hpp"

namespace trex::orlib {

NgramDiversity ngram_diversity(const std::vector<std::string>& texts, uint64_t seed, int n,
                               size_t sample) {
  require(n >= 1, "n-gram diversity needs n >= 1");
  std::vector<size_t> order(texts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (order.size() > sample) {
    Rng rng(seed, {hash_string("ngram-diversity-sample")});
    rng.shuffle(order);
    order.resize(sample);
  }
  NgramDiversity d;
  std::unordered_set<std::string> seen;
  for (size_t i : order) {
    ++d.texts;
    const std::vector<std::string> words = words_of(texts[i]);
    for (size_t w = 0; w + static_cast<size_t>(n) <= words.size(); ++w) {
      std::string gram = words[w];
      for (int k = 1; k < n; ++k) gram += ' ' + words[w + static_cast<size_t>(k)];
      ++d.total;
      if (seen.insert(std::move(gram)).second) ++d.distinct;
    }
  }
  return d;
}

std::map<std::string, NgramDiversity> benchmark_diversity(const std::string& dir, uint64_t seed) {
  std::map<std::string, NgramDiversity> out;
  for (const auto& [file, questions] : benchmark_questions(dir)) {
    std::vector<std::string> texts;
    for (const BenchmarkQuestion& q : questions) texts.push_back(q.text);
    if (!texts.empty())
      out[std::filesystem::path(file).stem().string()] = ngram_diversity(texts, seed);
  }
  return out;
}

void TextFormCounter::add(int nl_template, const std::string& surface_form) {
  ++texts_;
  templates_.insert(nl_template);
  forms_.insert(surface_form);
}

TextForms TextFormCounter::counts() const {
  return {texts_, static_cast<int64_t>(templates_.size()), static_cast<int64_t>(forms_.size())};
}

nlohmann::json diversity_json(const std::map<std::string, NgramDiversity>& families,
                              const std::map<std::string, TextForms>& forms,
                              const std::map<std::string, NgramDiversity>& benchmarks) {
  using nlohmann::json;
  auto entry = [](const NgramDiversity& d) {
    return json{{"texts", d.texts},
                {"ngrams", d.total},
                {"distinct", d.distinct},
                {"share", std::round(d.share() * 1e4) / 1e4}};
  };
  json by_family = json::object(), by_benchmark = json::object();
  for (const auto& [family, d] : families) {
    by_family[family] = entry(d);
    if (auto f = forms.find(family); f != forms.end()) {
      by_family[family]["all_texts"] = f->second.texts;
      by_family[family]["templates"] = f->second.templates;
      by_family[family]["surface_forms"] = f->second.surface_forms;
    }
  }
  for (const auto& [file, d] : benchmarks) by_benchmark[file] = entry(d);
  return {{"ngram", kDiversityNgram},
          {"sample", kDiversitySample},
          {"families", by_family},
          {"benchmarks", by_benchmark}};
}

}  // namespace trex::orlib
