#include "trex/or/eval/bench.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <unordered_map>

#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib::eval {
namespace {

const nlohmann::json* find_field(const nlohmann::json& record,
                                 std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto it = record.find(n);
    if (it != record.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

void add_texts(const nlohmann::json& value, std::vector<std::string>& out);

// A completion-ish value: a string, an OpenAI choice/message, or a list of them.
void add_text(const nlohmann::json& v, std::vector<std::string>& out) {
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_object()) {
    if (auto m = v.find("message"); m != v.end() && m->is_object()) {
      add_text(*m, out);
    } else if (auto c = v.find("content"); c != v.end() && c->is_string()) {
      out.push_back(c->get<std::string>());
    } else if (auto t = v.find("text"); t != v.end() && t->is_string()) {
      out.push_back(t->get<std::string>());
    }
  } else if (v.is_array()) {
    add_texts(v, out);
  }
}

void add_texts(const nlohmann::json& value, std::vector<std::string>& out) {
  for (const auto& v : value) add_text(v, out);
}

// The completions of one record; empty when it has none.
std::vector<std::string> record_completions(const nlohmann::json& r) {
  std::vector<std::string> out;
  if (const auto* v = find_field(
          r, {"completions", "responses", "outputs", "generations", "samples", "predictions"});
      v && v->is_array()) {
    add_texts(*v, out);
    return out;
  }
  if (const auto* v = find_field(r, {"completion", "response", "output", "generation",
                                     "generated_text", "model_output", "prediction", "text"})) {
    add_text(*v, out);
    return out;
  }
  if (const auto* v = find_field(r, {"choices"}); v && v->is_array()) {
    add_texts(*v, out);
    return out;
  }
  if (const auto* v = find_field(r, {"messages", "conversation"}); v && v->is_array()) {
    // The last assistant message of a chat transcript.
    for (auto it = v->rbegin(); it != v->rend(); ++it)
      if (it->is_object() && it->value("role", "") == "assistant") {
        add_text(*it, out);
        break;
      }
  }
  return out;
}

}  // namespace

std::string id_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return value.dump();
  if (value.is_number_float()) {
    double d = value.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) return format_number(d);
  }
  return value.dump();
}

std::vector<Benchmark> load_benchmarks(const std::vector<std::string>& paths,
                                       bool sentinel_as_unknown, const JsonlOptions& read) {
  std::vector<Benchmark> out;
  std::unordered_map<std::string, std::string> names;
  for (const auto& path : paths) {
    Benchmark b;
    b.path = path;
    b.name = std::filesystem::path(path).stem().string();
    if (auto [it, fresh] = names.emplace(b.name, path); !fresh)
      throw Error("two benchmark files share the name '" + b.name + "' (" + it->second + ")")
          .file(path);
    std::unordered_map<std::string, long> seen;
    b.read = read_jsonl_indexed(path, read, [&](const nlohmann::json& r, long line, long index) {
      if (!r.is_object()) throw Error("record is not a JSON object").file(path).line(line);
      BenchItem item;
      auto id = r.find("id");
      item.id = id != r.end() && !id->is_null() ? id_text(*id) : std::to_string(index);
      if (auto it = seen.find(item.id); it != seen.end())
        throw Error("duplicate id '" + item.id + "' (first on line " + std::to_string(it->second) +
                    ")")
            .file(path)
            .line(line)
            .field("id");
      item.source = r.value("source", "");
      if (auto q = r.find("question"); q != r.end() && q->is_string())
        item.question = q->get<std::string>();
      if (auto t = r.find("problem_type"); t != r.end() && !t->is_null())
        item.problem_type = t->is_string() ? t->get<std::string>() : t->dump();
      item.truth = ground_truth(r, sentinel_as_unknown);
      // Only a record that passed every check changes the benchmark.
      seen.emplace(item.id, line);
      b.has_types = b.has_types || !item.problem_type.empty();
      b.items.push_back(std::move(item));
    });
    out.push_back(std::move(b));
  }
  return out;
}

SampleTable load_completions(const std::string& path, const std::vector<Benchmark>& benchmarks,
                             JoinStats& stats, const JsonlOptions& read) {
  SampleTable table(benchmarks.size());
  // Lookups: bench name/source -> bench index; (bench, id) -> item; question -> items.
  std::unordered_map<std::string, size_t> bench_by_name;
  std::vector<std::unordered_map<std::string, size_t>> item_by_id(benchmarks.size());
  std::unordered_map<std::string, std::vector<std::pair<size_t, size_t>>> by_question;
  for (size_t b = 0; b < benchmarks.size(); ++b) {
    table[b].resize(benchmarks[b].items.size());
    bench_by_name.emplace(benchmarks[b].name, b);
    for (size_t i = 0; i < benchmarks[b].items.size(); ++i) {
      const BenchItem& item = benchmarks[b].items[i];
      if (!item.source.empty()) bench_by_name.emplace(item.source, b);
      item_by_id[b].emplace(item.id, i);
      if (!item.question.empty()) by_question[collapse_whitespace(item.question)].push_back({b, i});
    }
  }
  auto note = [&](long line, const std::string& why) {
    if (stats.examples.size() < 10)
      stats.examples.push_back("line " + std::to_string(line) + ": " + why);
  };
  stats.read = read_jsonl(path, read, [&](const nlohmann::json& r, long line) {
    if (!r.is_object()) throw Error("record is not a JSON object").file(path).line(line);
    std::vector<std::string> texts = record_completions(r);
    if (texts.empty() && find_field(r, {"completion", "completions", "response", "responses",
                                        "output", "outputs", "choices", "messages"}) == nullptr)
      throw Error("record has no completion field (expected \"completion\" or \"completions\")")
          .file(path)
          .line(line);
    ++stats.records;
    // Which benchmark(s) may hold it.
    std::vector<size_t> benches;
    if (const auto* s = find_field(r, {"source", "benchmark", "dataset", "bench", "file"})) {
      std::string name = s->is_string() ? s->get<std::string>() : s->dump();
      auto it = bench_by_name.find(name);
      if (it == bench_by_name.end())
        it = bench_by_name.find(std::filesystem::path(name).stem().string());
      if (it == bench_by_name.end()) {
        ++stats.unmatched;
        note(line, "unknown source '" + name + "'");
        return;
      }
      benches.push_back(it->second);
    } else {
      for (size_t b = 0; b < benchmarks.size(); ++b) benches.push_back(b);
    }
    std::string question;
    if (const auto* q = find_field(
            r, {"question", "en_question", "problem", "prompt", "instruction", "input", "query"});
        q && q->is_string())
      question = q->get<std::string>();

    std::vector<std::pair<size_t, size_t>> hits;
    bool by_id = false;
    if (const auto* id =
            find_field(r, {"id", "idx", "index", "problem_id", "question_id", "task_id", "qid"})) {
      std::string key = id_text(*id);
      for (size_t b : benches)
        if (auto it = item_by_id[b].find(key); it != item_by_id[b].end())
          hits.push_back({b, it->second});
      by_id = !hits.empty();
      if (hits.empty()) {
        ++stats.unmatched;
        note(line, "id '" + key + "' is in no benchmark" +
                       (benches.size() == 1 ? " '" + benchmarks[benches[0]].name + "'" : ""));
        return;
      }
      if (hits.size() > 1 && !question.empty()) {
        std::string q = collapse_whitespace(question);
        std::vector<std::pair<size_t, size_t>> narrowed;
        for (auto h : hits)
          if (collapse_whitespace(benchmarks[h.first].items[h.second].question) == q)
            narrowed.push_back(h);
        if (!narrowed.empty()) hits = narrowed;
      }
    } else if (!question.empty()) {
      std::string q = collapse_whitespace(question);
      if (auto it = by_question.find(q); it != by_question.end()) {
        for (auto h : it->second)
          if (std::find(benches.begin(), benches.end(), h.first) != benches.end())
            hits.push_back(h);
      }
      if (hits.empty()) {
        // A prompt that embeds the question: the longest question it contains.
        size_t best_len = 0;
        for (size_t b : benches)
          for (size_t i = 0; i < benchmarks[b].items.size(); ++i) {
            const std::string& bq = benchmarks[b].items[i].question;
            if (bq.size() < 20 || bq.size() < best_len) continue;
            if (q.find(collapse_whitespace(bq)) == std::string::npos) continue;
            if (bq.size() > best_len) hits.clear();
            best_len = bq.size();
            hits.push_back({b, i});
          }
      }
      if (hits.empty()) {
        ++stats.unmatched;
        note(line, "no benchmark question matches");
        return;
      }
    } else {
      ++stats.unmatched;
      note(line, "record has neither an id nor a question");
      return;
    }
    if (hits.size() > 1) {
      ++stats.ambiguous;
      note(line, "matches " + std::to_string(hits.size()) +
                     " items in different benchmarks; add a \"source\" field");
      return;
    }
    (by_id ? stats.by_id : stats.by_question) += 1;
    auto [b, i] = hits.front();
    for (auto& t : texts) table[b][i].push_back(std::move(t));
    stats.samples += static_cast<int64_t>(texts.size());
  });
  return table;
}

}  // namespace trex::orlib::eval
