#include "trex/demo/demo_data.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <unordered_set>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/log.hpp"
#include "trex/core/process_pool.hpp"
#include "trex/core/progress.hpp"
#include "trex/core/rng.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/dataset/decontam.hpp"
#include "trex/or/dataset/diversity.hpp"
#include "trex/or/dataset/entity_names.hpp"
#include "trex/or/dataset/gmpl_edit.hpp"
#include "trex/or/dataset/sft.hpp"
#include "trex/or/eval/bench.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"
#include "trex/or/synth/synth.hpp"
#include "trex/or/synth/verify.hpp"

namespace trex::demo {

// The demo's data come from the OR library's families, solvers and datasets.
using namespace trex::orlib;
namespace {

// ---------------------------------------------------------------- data sections

bool same_value(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(a));
}

// Statements whose values the demo reorders to follow the question's text.
bool reorderable(const DataStatement& s) {
  return s.kind == DataStatement::scalar || s.kind == DataStatement::vector ||
         s.kind == DataStatement::table;
}

std::vector<double> as_numbers(const std::vector<std::string>& tokens) {
  std::vector<double> out;
  for (const auto& t : tokens) {
    double v = 0;
    if (parse_number(t, v)) out.push_back(v);
  }
  return out;
}

// Positions in `numbers` of a greedy in-order match of `values` (-1: not matched).
std::vector<long> greedy_positions(const std::vector<double>& values,
                                   const std::vector<double>& numbers) {
  std::vector<long> out;
  size_t from = 0;
  for (double v : values) {
    long found = -1;
    for (size_t k = from; k < numbers.size(); ++k)
      if (same_value(numbers[k], v)) {
        found = static_cast<long>(k);
        from = k + 1;
        break;
      }
    out.push_back(found);
  }
  return out;
}

size_t matched(const std::vector<double>& values, const std::vector<double>& numbers) {
  auto p = greedy_positions(values, numbers);
  return static_cast<size_t>(std::count_if(p.begin(), p.end(), [](long x) { return x >= 0; }));
}

// Where a statement's values sit in the text: the median matched position.
double text_position(const std::vector<double>& values, const std::vector<double>& numbers) {
  std::vector<long> p;
  for (long x : greedy_positions(values, numbers))
    if (x >= 0) p.push_back(x);
  if (p.empty()) return std::numeric_limits<double>::infinity();
  std::nth_element(p.begin(), p.begin() + static_cast<long>(p.size() / 2), p.end());
  return static_cast<double>(p[p.size() / 2]);
}

// A group of 1-D parameters over the same keys, written as one table when merged.
struct Group {
  std::vector<const DataStatement*> members;
  // The keys of each value position ("k" or "row col") and its index into
  // `values`, in the head's written order.
  std::vector<std::pair<std::string, size_t>> cells() const {
    const DataStatement* h = members.front();
    std::vector<std::pair<std::string, size_t>> out;
    if (h->kind == DataStatement::vector) {
      for (size_t i = 0; i < h->keys.size(); ++i) out.push_back({h->keys[i], i});
      return out;
    }
    const size_t rows = h->keys.size(), cols = h->cols.size();
    for (size_t a = 0; a < (h->transposed ? cols : rows); ++a)
      for (size_t b = 0; b < (h->transposed ? rows : cols); ++b) {
        const size_t r = h->transposed ? b : a, c = h->transposed ? a : b;
        out.push_back({h->keys[r] + " " + h->cols[c], r * cols + c});
      }
    return out;
  }
  std::vector<double> interleaved() const {
    std::vector<double> out;
    for (const auto& [key, i] : cells())
      for (const auto* m : members) out.push_back(as_numbers({m->values[i]}).front());
    return out;
  }
};

// Statements that can share one table: same kind and the same keys.
bool same_shape(const DataStatement& a, const DataStatement& b) {
  if (a.kind != b.kind || a.keys != b.keys) return false;
  return a.kind == DataStatement::vector || (a.kind == DataStatement::table && a.cols == b.cols);
}

std::string render(const Group& g) {
  if (g.members.size() == 1) return render(*g.members.front());
  std::string out = "param :";
  for (const auto* m : g.members) out += " " + m->name;
  out += " :=";
  for (const auto& [key, i] : g.cells()) {
    out += "\n" + key;
    for (const auto* m : g.members) out += " " + m->values[i];
  }
  return out + ";\n";
}

std::vector<double> group_values(const Group& g, bool merged) {
  if (merged) return g.interleaved();
  std::vector<double> out;
  for (const auto* m : g.members) {
    auto v = as_numbers(written_values(*m));
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// ---------------------------------------------------------------- generation

struct DemoItem {
  Problem problem;
  CompactTarget target;
  std::string prompt;
  uint64_t question_hash = 0;
  uint64_t target_hash = 0;
  const DemoItem* before_renaming = nullptr;  // the item as generated, when renamed
};

const Family& family_named(const std::string& name) {
  return find_family(name);
}

void write_jsonl(const std::string& path, const std::vector<json>& records) {
  std::string text;
  for (const auto& r : records) text += dump_compact(r) + "\n";
  write_file_atomic(path, text);
}

json chat_record(const DemoItem& it, const std::string& split) {
  return {{"messages", json::array({{{"role", "user"}, {"content", it.prompt}},
                                    {{"role", "assistant"}, {"content", it.target.text}}})},
          {"meta",
           {{"family", it.problem.family},
            {"problem_id", it.problem.id},
            {"nl_template", it.problem.nl_template},
            {"objective", it.problem.objective},
            {"split", split}}}};
}

json bench_record(const DemoItem& it, const std::string& split) {
  return {{"id", it.problem.id},
          {"source", split},
          {"question", it.problem.nl},
          {"answer", it.problem.objective},
          {"answer_status", "optimal"},
          {"problem_type", it.problem.family},
          {"nl_template", it.problem.nl_template}};
}

json prompt_record(const std::string& id, const std::string& source, const std::string& question) {
  std::string prompt = demo_user_prompt(question);
  return {{"id", id},
          {"source", source},
          {"format", "mathprog"},
          {"prompt", prompt},
          {"messages", json::array({{{"role", "user"}, {"content", prompt}}})}};
}

// `item` with its named entities renamed (or/dataset/entity_names.hpp) in
// every text of it, or nullopt when no clean renaming fits `max_chars`.
// Longer names can take a problem over the limit: two more draws, the other
// source first (pooled names are shorter than most invented ones); `source`
// ends as the one used.
std::optional<DemoItem> renamed_item(const DemoItem& item, NameSource& source, Rng& rng,
                                     const std::set<std::string>& excluded, size_t max_chars) {
  const Problem& p = item.problem;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0)
      source = source == NameSource::invented ? NameSource::pooled : NameSource::invented;
    const auto renaming = plan_renaming(
        p.nl, item.target.model,
        {{p.gmpl, Written::symbols}, {p.alg, Written::latex}, {item.target.text, Written::symbols}},
        source, rng, excluded);
    if (!renaming) continue;
    DemoItem r = item;
    r.before_renaming = &item;
    r.problem.nl = renaming->apply(p.nl, Written::prose);
    r.problem.gmpl = renaming->apply(p.gmpl, Written::symbols);
    r.problem.alg = renaming->apply(p.alg, Written::latex);
    r.target.text = renaming->apply(item.target.text, Written::symbols);
    r.target.model = renaming->apply(item.target.model, Written::symbols);
    r.prompt = demo_user_prompt(r.problem.nl);
    if (max_chars > 0 && r.prompt.size() + r.target.text.size() > max_chars) continue;
    r.question_hash = hash_string(normalize_text(r.problem.nl));
    r.target_hash = hash_string(r.target.model);
    return r;
  }
  return std::nullopt;
}

// Round-robin over the families' buckets: balanced families in a stable order.
std::vector<const DemoItem*> interleave(const std::map<std::string, std::vector<DemoItem>>& buckets,
                                        const std::vector<std::string>& families) {
  std::vector<const DemoItem*> out;
  for (size_t i = 0;; ++i) {
    bool any = false;
    for (const auto& f : families) {
      auto it = buckets.find(f);
      if (it != buckets.end() && i < it->second.size()) {
        out.push_back(&it->second[i]);
        any = true;
      }
    }
    if (!any) break;
  }
  return out;
}

int64_t per_family(int64_t total, size_t families) {
  return families == 0
             ? 0
             : (total + static_cast<int64_t>(families) - 1) / static_cast<int64_t>(families);
}

// The public slice: per file, the shortest scoreable questions, round-robin.
std::vector<json> public_slice(const DemoDataOptions& o) {
  std::vector<json> out;
  if (o.bench_dir.empty() || o.sizes.public_items <= 0) return out;
  const auto& files = o.public_files.empty() ? demo_default_public_files() : o.public_files;
  std::vector<std::vector<json>> per_file;
  for (const auto& stem : files) {
    const std::string path = o.bench_dir + "/" + stem + ".jsonl";
    if (!std::filesystem::exists(path)) throw Error("public benchmark file not found").file(path);
    std::vector<std::pair<size_t, json>> candidates;
    long position = 0;
    read_jsonl(path, [&](const json& r, long line) {
      if (!r.is_object()) throw Error("record is not a JSON object").file(path).line(line);
      const std::string id = r.contains("id") && !r["id"].is_null() ? eval::id_text(r["id"])
                                                                    : std::to_string(position);
      ++position;
      if (r.value("answer_status", std::string()) != "optimal" || !r.contains("question") ||
          !r["question"].is_string() || !r.contains("answer") || !r["answer"].is_number())
        return;
      const std::string q = r["question"].get<std::string>();
      candidates.push_back({q.size(),
                            {{"id", stem + ":" + id},
                             {"source", "public"},
                             {"question", q},
                             {"answer", r["answer"]},
                             {"answer_status", "optimal"},
                             {"problem_type", stem},
                             {"orig_source", stem},
                             {"orig_id", id}}});
    });
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<json> list;
    for (auto& c : candidates) list.push_back(std::move(c.second));
    per_file.push_back(std::move(list));
  }
  for (size_t i = 0; static_cast<int64_t>(out.size()) < o.sizes.public_items; ++i) {
    bool any = false;
    for (const auto& list : per_file)
      if (i < list.size() && static_cast<int64_t>(out.size()) < o.sizes.public_items) {
        out.push_back(list[i]);
        any = true;
      }
    if (!any) break;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- public API

DemoSizes demo_preset_sizes(std::string_view preset) {
  DemoSizes s;
  if (preset == "default") {
    s.sft_train = 2400;
    s.sft_val = 60;
    s.test = 80;
    s.heldout_template = 80;
    s.heldout_family = 60;
    s.public_items = 60;
    s.cpt_problems = 2400;
    s.side_constraint_rate = 0.0;
    s.max_chars = 1600;
  } else if (preset == "full") {
    s.sft_train = 10000;
    s.sft_val = 200;
    s.test = 200;
    s.heldout_template = 200;
    s.heldout_family = 200;
    s.public_items = 200;
    s.cpt_problems = 16000;
    s.side_constraint_rate = 0.2;
    s.max_chars = 2600;
  } else {
    throw Error("unknown demo preset '" + std::string(preset) + "' (default|full)").field("preset");
  }
  return s;
}

const std::vector<std::string>& demo_default_train_families(std::string_view preset) {
  // lot_sizing's questions and models are the longest (~560 tokens a pair with a
  // 4K vocabulary): only the full preset, with its longer limit, trains it.
  static const std::vector<std::string> small = {"product_mix", "transportation", "assignment",
                                                 "bin_packing"};
  static const std::vector<std::string> full = {"product_mix", "transportation", "assignment",
                                                "bin_packing", "lot_sizing"};
  return preset == "full" ? full : small;
}
const std::vector<std::string>& demo_default_heldout_families() {
  static const std::vector<std::string> f = {"diet", "knapsack"};
  return f;
}
const std::vector<std::string>& demo_default_public_files() {
  static const std::vector<std::string> f = {"nl4opt_sirl", "mamo_easylp_sirl_fixed",
                                             "industryor_sirl_fixedv2"};
  return f;
}

std::string demo_user_prompt(const std::string& question) {
  return "Write a GNU MathProg model with its data for this problem.\n\n" + question;
}

std::vector<TextNumber> text_number_spans(const std::string& text) {
  std::vector<TextNumber> out;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) continue;
    if (i > 0 && (std::isalpha(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '_')) {
      while (i < n && std::isalnum(static_cast<unsigned char>(text[i]))) ++i;
      continue;
    }
    const bool negative = i > 0 && text[i - 1] == '-' &&
                          (i == 1 || !std::isalnum(static_cast<unsigned char>(text[i - 2])));
    std::string digits = negative ? "-" : "";
    size_t j = i;
    while (j < n) {
      char c = text[j];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        digits += c;
      } else if (c == ',' && j + 3 < n && digits.find('.') == std::string::npos &&
                 std::isdigit(static_cast<unsigned char>(text[j + 1])) &&
                 std::isdigit(static_cast<unsigned char>(text[j + 2])) &&
                 std::isdigit(static_cast<unsigned char>(text[j + 3])) &&
                 (j + 4 >= n || !std::isdigit(static_cast<unsigned char>(text[j + 4])))) {
        // thousands separator ("1,250"), not a list comma ("3,4")
      } else if (c == '.' && j + 1 < n && std::isdigit(static_cast<unsigned char>(text[j + 1])) &&
                 digits.find('.') == std::string::npos) {
        digits += c;
      } else {
        break;
      }
      ++j;
    }
    out.push_back({negative ? i - 1 : i, j, digits, std::strtod(digits.c_str(), nullptr)});
    i = j > i ? j - 1 : i;
  }
  return out;
}

std::vector<double> text_numbers(const std::string& text) {
  std::vector<double> out;
  for (const TextNumber& t : text_number_spans(text)) out.push_back(t.value);
  return out;
}

namespace {

// Sentences and lines of a question: split after '.', '?', '!' or ':' followed
// by whitespace, and at every line break; empty pieces are dropped.
std::vector<std::pair<size_t, size_t>> text_segments(const std::string& text) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  auto close = [&](size_t end) {
    while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
    if (end > begin) out.push_back({begin, end});
    begin = end;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      close(i);
    } else if ((c == '.' || c == '?' || c == '!' || c == ':') && i + 1 < text.size() &&
               std::isspace(static_cast<unsigned char>(text[i + 1]))) {
      close(i + 1);
    }
  }
  close(text.size());
  return out;
}

}  // namespace

std::vector<std::string> copy_drills(const std::string& question, const std::string& data_section,
                                     int count, uint64_t seed) {
  std::vector<std::string> elements;
  for (const DataStatement& s : parse_data_section(data_section)) {
    if (s.kind != DataStatement::set) continue;
    std::vector<std::string> t = statement_tokens(s.raw);
    auto assign = std::find(t.begin(), t.end(), ":=");
    if (assign != t.end()) elements.insert(elements.end(), assign + 1, t.end());
  }
  // Every value of the question: numbers and set elements (an element written
  // `annual_report` also matches "annual report"), longest match first.
  struct Item {
    size_t begin, end;
    std::string text;
  };
  std::vector<Item> items;
  for (const TextNumber& t : text_number_spans(question))
    items.push_back({t.begin, t.end, t.digits});
  for (const std::string& e : elements) {
    std::string spaced = e;
    std::replace(spaced.begin(), spaced.end(), '_', ' ');
    for (const std::string& phrase : {e, spaced}) {
      for (size_t at : word_occurrences(question, phrase))
        items.push_back({at, at + phrase.size(), e});
      if (spaced == e) break;
    }
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::vector<Item> kept;
  for (const Item& it : items)
    if (kept.empty() || it.begin >= kept.back().end) kept.push_back(it);

  std::vector<std::pair<size_t, size_t>> segments;
  for (const auto& seg : text_segments(question)) {
    const bool has_value = std::any_of(kept.begin(), kept.end(), [&](const Item& it) {
      return it.begin >= seg.first && it.end <= seg.second;
    });
    if (has_value) segments.push_back(seg);
  }
  std::vector<std::string> out;
  if (segments.empty()) return out;
  Rng rng(seed, {hash_string("demo-copy-drill")});
  for (int d = 0; d < count; ++d) {
    const auto first =
        static_cast<size_t>(rng.uniform_int(int64_t{0}, static_cast<int64_t>(segments.size()) - 1));
    const size_t last =
        std::min(segments.size() - 1, first + static_cast<size_t>(rng.uniform_int(0, 2)));
    const size_t begin = segments[first].first;
    const size_t end = segments[last].second;
    std::string drill = question.substr(begin, end - begin) + "\nin order:";
    for (const Item& it : kept)
      if (it.begin >= begin && it.end <= end) drill += " " + it.text;
    out.push_back(std::move(drill));
  }
  return out;
}

std::vector<double> data_section_values(const std::string& data) {
  std::vector<double> out;
  for (const auto& s : parse_data_section(data)) {
    if (!reorderable(s)) continue;
    auto v = as_numbers(written_values(s));
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

double in_order_fraction(const std::vector<double>& values, const std::vector<double>& numbers) {
  if (values.empty()) return 1.0;
  return static_cast<double>(matched(values, numbers)) / static_cast<double>(values.size());
}

std::string reorder_data_section(const std::string& data, const std::vector<double>& numbers) {
  std::vector<DataStatement> statements = parse_data_section(data);
  std::vector<const DataStatement*> sets, others;
  std::vector<std::pair<double, const DataStatement*>> numeric;
  for (auto& s : statements) {
    if (s.kind == DataStatement::table) {
      s.transposed = true;
      const size_t by_col = matched(as_numbers(written_values(s)), numbers);
      s.transposed = false;
      const size_t by_row = matched(as_numbers(written_values(s)), numbers);
      s.transposed = by_col > by_row;
    }
    if (s.kind == DataStatement::set) {
      sets.push_back(&s);
    } else if (!reorderable(s)) {
      others.push_back(&s);
    } else {
      numeric.push_back({text_position(as_numbers(written_values(s)), numbers), &s});
    }
  }
  std::stable_sort(numeric.begin(), numeric.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // Merge neighbouring parameters over the same keys when the text gives their
  // values key by key (a table row per key, or "$70 (19 days)" per cell).
  std::vector<Group> groups;
  for (const auto& [position, s] : numeric) {
    if (!groups.empty()) {
      Group& last = groups.back();
      const DataStatement* head = last.members.front();
      if (same_shape(*head, *s)) {
        Group candidate = last;
        candidate.members.push_back(s);
        Group apart = candidate;
        if (matched(candidate.interleaved(), numbers) >
            matched(group_values(apart, false), numbers)) {
          last = candidate;
          continue;
        }
      }
    }
    groups.push_back(Group{{s}});
  }
  std::string out;
  for (const auto* s : sets) out += render(*s);
  for (const auto* s : others) out += render(*s);
  for (const auto& g : groups) out += render(g);
  return out;
}

CompactTarget compact_target(const std::string& question, const std::string& gmpl) {
  const size_t data_at = gmpl.find("\ndata;");
  const size_t end_at = gmpl.rfind("end;");
  require(data_at != std::string::npos && end_at != std::string::npos && end_at > data_at,
          "GMPL model without a `data; ... end;` section");
  size_t model_end = gmpl.find("\nsolve;");
  if (model_end == std::string::npos || model_end > data_at) model_end = data_at;
  const std::string model = trim(gmpl.substr(0, model_end));
  const std::string data = gmpl.substr(data_at + 6, end_at - data_at - 6);
  const std::vector<double> numbers = text_numbers(question);
  CompactTarget t;
  const std::string reordered = reorder_data_section(data, numbers);
  t.order_before = in_order_fraction(data_section_values(data), numbers);
  t.order_after = in_order_fraction(data_section_values(reordered), numbers);
  t.model = model + "\ndata;\n" + reordered + "end;\n";
  t.text = "```mathprog\n" + t.model + "```";
  return t;
}

json DemoDataSummary::to_json() const {
  return {{"split_sizes", split_sizes},
          {"cpt_documents", cpt_documents},
          {"cpt_bytes", cpt_bytes},
          {"problems_generated", problems_generated},
          {"skipped_long", skipped_long},
          {"skipped_duplicate", skipped_duplicate},
          {"unused", unused},
          {"verified_solves", verified_solves},
          {"train_families", train_families},
          {"heldout_families", heldout_families},
          {"heldout_templates", heldout_templates},
          {"data_order_before", order_before},
          {"data_order_after", order_after},
          {"mean_prompt_chars", mean_prompt_chars},
          {"mean_target_chars", mean_target_chars},
          {"max_total_chars", max_total_chars},
          {"max_bench_overlap", max_bench_overlap},
          {"diversity", diversity_json(family_diversity, family_forms, bench_diversity)},
          {"decontamination",
           {{"benchmark_questions", decontam_questions},
            {"dropped_ngram", decontam_ngram},
            {"dropped_number_signature", decontam_signature}}},
          {"renamed_entities", {{"by_source", renamed}, {"not_renamed", renamed_skipped}}},
          {"public_sources", public_sources},
          {"seconds", seconds}};
}

DemoDataSummary build_demo_data(const DemoDataOptions& o) {
  require(!o.out_dir.empty(), "an output directory is required");
  const DemoSizes& z = o.sizes;
  require(z.sft_train > 0 && z.sft_val >= 0 && z.test >= 0 && z.heldout_template >= 0 &&
              z.heldout_family >= 0 && z.public_items >= 0,
          "demo sizes must be non-negative (and sft_train positive)");
  const auto start = std::chrono::steady_clock::now();
  DemoDataSummary summary;
  summary.train_families =
      o.train_families.empty() ? demo_default_train_families(o.preset) : o.train_families;
  summary.heldout_families =
      o.heldout_families.empty() ? demo_default_heldout_families() : o.heldout_families;
  std::vector<const Family*> train_fams, heldout_fams;
  for (const auto& f : summary.train_families) train_fams.push_back(&family_named(f));
  for (const auto& f : summary.heldout_families) {
    heldout_fams.push_back(&family_named(f));
    require(std::find(summary.train_families.begin(), summary.train_families.end(), f) ==
                summary.train_families.end(),
            "family '" + f + "' is both trained and held out");
  }
  require(!train_fams.empty(), "at least one training family is required");
  require(z.heldout_family == 0 || !heldout_fams.empty(),
          "held-out-family items requested but no held-out family given");
  for (const auto* f : train_fams) {
    require(f->nl_templates() >= 2,
            "family '" + std::string(f->name()) + "' has fewer than 2 templates");
    Rng rng(o.seed, {hash_string("demo-heldout-template"), hash_string(f->name())});
    summary.heldout_templates[std::string(f->name())] =
        static_cast<int>(rng.index(static_cast<size_t>(f->nl_templates())));
  }

  // Quotas per family. Problems for the trained families serve test, val, SFT
  // train and the CPT-only extra, in that order.
  const int64_t cpt_extra = std::max<int64_t>(0, z.cpt_problems - z.sft_train);
  const int64_t trained_total = z.test + z.sft_val + z.sft_train + cpt_extra;
  const size_t nf = train_fams.size(), nh = heldout_fams.size();
  const int64_t want_trained = per_family(trained_total, nf);
  const int64_t want_template = per_family(z.heldout_template, nf);
  const int64_t want_family = per_family(z.heldout_family, nh);

  std::map<std::string, std::vector<DemoItem>> trained, held_template, held_family;
  std::unordered_set<uint64_t> seen_questions, seen_targets;
  std::map<std::string, std::pair<double, double>> order_sums;
  std::map<std::string, int64_t> order_counts;
  // Per family: problems offered to a bucket that still wanted some, and those
  // kept (not too long, not contaminated, not a duplicate). Their ratio sizes the
  // next batch: composed texts of some families rarely fit max_chars.
  std::map<std::string, int64_t> offered, kept;

  // Every benchmark question of bench_dir, against which the problems of the
  // trained families (SFT, CPT and their copy drills all come from them) are
  // decontaminated as they arrive (docs/or-datasets.md "Decontamination").
  std::optional<NgramIndex> bench_index;
  if (o.decontaminate && !o.bench_dir.empty() && std::filesystem::is_directory(o.bench_dir)) {
    bench_index.emplace();
    bench_index->add_directory(o.bench_dir);
    summary.decontam_questions = static_cast<int64_t>(bench_index->questions());
  }
  // true (and counted) when a trained problem matches a benchmark question.
  auto contaminated = [&](const std::string& question, const std::string& text) {
    if (!bench_index) return false;
    if (bench_index->max_overlap(text).fraction >= kDecontamThreshold) {
      ++summary.decontam_ngram;
      return true;
    }
    if (bench_index->max_signature_share(question).fraction >= kSignatureShare) {
      ++summary.decontam_signature;
      return true;
    }
    return false;
  };

  auto accept = [&](const std::string& record) {
    ++summary.problems_generated;
    Problem p = parse_problem(json::parse(record));
    const bool is_heldout_family =
        std::find(summary.heldout_families.begin(), summary.heldout_families.end(), p.family) !=
        summary.heldout_families.end();
    std::vector<DemoItem>* bucket = nullptr;
    int64_t want = 0;
    if (is_heldout_family) {
      bucket = &held_family[p.family];
      want = want_family;
    } else if (p.nl_template == summary.heldout_templates.at(p.family)) {
      bucket = &held_template[p.family];
      want = want_template;
    } else {
      bucket = &trained[p.family];
      want = want_trained;
    }
    if (static_cast<int64_t>(bucket->size()) >= want) {
      ++summary.unused;
      return;
    }
    ++offered[p.family];
    DemoItem it;
    it.target = compact_target(p.nl, p.gmpl);
    it.prompt = demo_user_prompt(p.nl);
    // Held-out items get twice the limit: a held-out template may be one whose
    // instances are all longer than the trained ones (docs/demo.md).
    const size_t limit = bucket == &trained[p.family] ? z.max_chars : 2 * z.max_chars;
    if (z.max_chars > 0 && it.prompt.size() + it.target.text.size() > limit) {
      ++summary.skipped_long;
      return;
    }
    if (bucket == &trained[p.family] && contaminated(p.nl, it.prompt + "\n" + it.target.text))
      return;
    it.question_hash = hash_string(normalize_text(p.nl));
    it.target_hash = hash_string(it.target.model);
    if (seen_questions.count(it.question_hash) || seen_targets.count(it.target_hash)) {
      ++summary.skipped_duplicate;
      return;
    }
    seen_questions.insert(it.question_hash);
    seen_targets.insert(it.target_hash);
    order_sums[p.family].first += it.target.order_before;
    order_sums[p.family].second += it.target.order_after;
    order_counts[p.family] += 1;
    ++kept[p.family];
    it.problem = std::move(p);
    bucket->push_back(std::move(it));
  };

  auto missing = [](const std::map<std::string, std::vector<DemoItem>>& buckets,
                    const std::string& family, int64_t want) {
    auto it = buckets.find(family);
    return std::max<int64_t>(
        0, want - (it == buckets.end() ? 0 : static_cast<int64_t>(it->second.size())));
  };
  auto deficit = [&](const std::map<std::string, std::vector<DemoItem>>& buckets,
                     const std::vector<const Family*>& fams, int64_t want) {
    int64_t worst = 0;
    for (const auto* f : fams)
      worst = std::max(worst, missing(buckets, std::string(f->name()), want));
    return worst;
  };
  // The share of a family's offered problems that were kept so far (1 before any).
  auto keep_rate = [&](const std::string& family) {
    const int64_t n = offered[family];
    return n == 0 ? 1.0
                  : std::max(0.01, static_cast<double>(kept[family]) / static_cast<double>(n));
  };

  constexpr int kMaxBatches = 8;
  for (int batch = 0; batch < kMaxBatches; ++batch) {
    const int64_t d_trained = deficit(trained, train_fams, want_trained);
    const int64_t d_template = deficit(held_template, train_fams, want_template);
    const int64_t d_family = nh == 0 ? 0 : deficit(held_family, heldout_fams, want_family);
    if (d_trained <= 0 && d_template <= 0 && d_family <= 0) break;
    SynthRequest request;
    request.settings.seed = hash_combine(o.seed, static_cast<uint64_t>(batch));
    request.settings.mixed_difficulty = false;
    request.settings.difficulty = parse_difficulty(o.difficulty);
    request.settings.side_constraint_rate = z.side_constraint_rate;
    request.settings.time_limit_seconds = o.time_limit_seconds;
    request.settings.record_timings = false;
    request.jobs = o.jobs;
    request.show_progress = o.show_progress;
    if (d_trained > 0 || d_template > 0) {
      // Templates are drawn uniformly: a family with T templates gives the
      // held-out one 1/T of its instances. Over-ask for skipped ones.
      // Each family's own deficits, over its measured keep rate.
      int64_t count_per_family = 0;
      for (const auto* f : train_fams) {
        const std::string name(f->name());
        const double t = f->nl_templates();
        const double need =
            std::max(static_cast<double>(missing(trained, name, want_trained)) * t / (t - 1.0),
                     static_cast<double>(missing(held_template, name, want_template)) * t);
        count_per_family = std::max(
            count_per_family, static_cast<int64_t>(std::ceil(need * 1.6 / keep_rate(name))) + 4);
      }
      request.families = train_fams;
      request.count = count_per_family * static_cast<int64_t>(nf);
      if (o.show_progress)
        log::info("demo data: synthesising " + std::to_string(request.count) +
                  " problems of the trained families (batch " + std::to_string(batch + 1) + ")");
      run_synth(request, accept);
    }
    if (d_family > 0) {
      request.settings.seed = hash_combine(o.seed, 1000 + static_cast<uint64_t>(batch));
      request.families = heldout_fams;
      double rate = 1.0;
      for (const auto* f : heldout_fams) rate = std::min(rate, keep_rate(std::string(f->name())));
      request.count =
          (static_cast<int64_t>(std::ceil(static_cast<double>(d_family) * 1.3 / rate)) + 4) *
          static_cast<int64_t>(nh);
      if (o.show_progress)
        log::info("demo data: synthesising " + std::to_string(request.count) +
                  " problems of the held-out families (batch " + std::to_string(batch + 1) + ")");
      run_synth(request, accept);
    }
    if (batch + 1 == kMaxBatches) {
      std::vector<std::string> short_of;
      auto report = [&](const std::map<std::string, std::vector<DemoItem>>& buckets,
                        const std::vector<const Family*>& fams, int64_t want, const char* what) {
        for (const auto* f : fams) {
          const std::string name(f->name());
          if (const int64_t m = missing(buckets, name, want); m > 0)
            short_of.push_back(name + " " + std::to_string(m) + " " + what + " (kept " +
                               std::to_string(kept[name]) + " of " + std::to_string(offered[name]) +
                               " offered)");
        }
      };
      report(trained, train_fams, want_trained, "trained");
      report(held_template, train_fams, want_template, "held-out-template");
      report(held_family, heldout_fams, want_family, "held-out-family");
      throw Error("demo data: could not fill the quotas after " + std::to_string(kMaxBatches) +
                  " synthesis batches; missing: " + join(short_of, ", ") +
                  " (raise max_chars or lower the sizes)");
    }
  }

  // Splits: round-robin over families, then consecutive slices.
  std::vector<const DemoItem*> pool = interleave(trained, summary.train_families);
  auto take = [&](std::vector<const DemoItem*>& from, size_t& at, int64_t n) {
    std::vector<const DemoItem*> out;
    for (int64_t i = 0; i < n && at < from.size(); ++i) out.push_back(from[at++]);
    return out;
  };
  size_t at = 0;
  std::vector<const DemoItem*> test = take(pool, at, z.test);
  std::vector<const DemoItem*> val = take(pool, at, z.sft_val);
  std::vector<const DemoItem*> train = take(pool, at, z.sft_train);
  std::vector<const DemoItem*> cpt_only = take(pool, at, cpt_extra);
  std::vector<const DemoItem*> ho_template = interleave(held_template, summary.train_families);
  ho_template.resize(std::min<size_t>(ho_template.size(), static_cast<size_t>(z.heldout_template)));
  std::vector<const DemoItem*> ho_family = interleave(held_family, summary.heldout_families);
  ho_family.resize(std::min<size_t>(ho_family.size(), static_cast<size_t>(z.heldout_family)));
  require(static_cast<int64_t>(train.size()) == z.sft_train &&
              static_cast<int64_t>(test.size()) == z.test,
          "demo data: internal error, quotas not met");

  // Renamed entities (or/dataset/entity_names.hpp): a share of the trained
  // problems call their products, places, workers ... by invented names or by
  // names of the other pools, so that answers copy names from the question.
  // Never a name that an evaluated problem uses.
  std::deque<DemoItem> renamed_items;  // stable addresses for the lists' pointers
  if (z.renamed_share > 0) {
    std::set<std::string> evaluated_names;
    for (const auto* list : {&test, &val, &ho_template, &ho_family})
      for (const auto* it : *list)
        for (const std::string& e : named_elements(it->problem.nl, it->target.model))
          evaluated_names.insert(name_key(e));
    for (auto* list : {&train, &cpt_only})
      for (const DemoItem*& it : *list) {
        const Problem& p = it->problem;
        Rng rng(o.seed, {hash_string("demo-renamed-entities"), hash_string(p.id)});
        if (!rng.bernoulli(z.renamed_share)) continue;
        NameSource source = rng.bernoulli(0.5) ? NameSource::invented : NameSource::pooled;
        std::optional<DemoItem> renamed =
            renamed_item(*it, source, rng, evaluated_names, z.max_chars);
        if (!renamed) {
          ++summary.renamed_skipped;
          continue;
        }
        renamed_items.push_back(std::move(*renamed));
        it = &renamed_items.back();
        ++summary.renamed[to_string(source)];
      }
  }

  // Decontamination: no evaluated instance's question or target may appear in
  // anything trained on (SFT train and the CPT corpus).
  {
    std::unordered_set<uint64_t> trained_hashes;
    for (const auto* list : {&train, &cpt_only})
      for (const auto* it : *list) {
        trained_hashes.insert(it->question_hash);
        trained_hashes.insert(it->target_hash);
      }
    for (const auto* list : {&test, &val, &ho_template, &ho_family})
      for (const auto* it : *list)
        if (trained_hashes.count(it->question_hash) || trained_hashes.count(it->target_hash))
          throw Error("demo data: evaluated problem " + it->problem.id +
                      " also occurs in the training data");
    for (const auto* it : train)
      if (it->problem.nl_template == summary.heldout_templates.at(it->problem.family))
        throw Error("demo data: held-out template in SFT train (" + it->problem.id + ")");
  }

  // Every compact target is re-solved and must reach the recorded optimum.
  std::vector<const DemoItem*> to_verify;
  for (const auto* list : {&test, &val, &train, &cpt_only, &ho_template, &ho_family})
    to_verify.insert(to_verify.end(), list->begin(), list->end());
  {
    std::optional<Progress> progress;
    if (o.show_progress) progress.emplace("demo verify", static_cast<int64_t>(to_verify.size()));
    int64_t next = 0, finished = 0;
    std::vector<std::string> failures;
    ProcessPoolOptions pool_options;
    pool_options.workers = o.jobs;
    pool_options.limits.core_dumps = false;  // GLPK aborts on internal errors
    ProcessPool pool(pool_options, [&](int, const PoolItem& job) -> std::string {
      const DemoItem& it = *to_verify[static_cast<size_t>(job.id)];
      try {
        LinearModel m = LinearModel::from_mathprog(it.target.model, it.problem.id + ".mod");
        SolveOptions so;
        so.time_limit_seconds = o.time_limit_seconds;
        SolveResult r = m.solve_glpk(so);
        if (r.status != SolveStatus::optimal) return std::string("!") + to_string(r.status);
        if (!objectives_agree(r.objective, it.problem.objective))
          return "!objective " + format_number(r.objective) + " vs " +
                 format_number(it.problem.objective);
        return "ok";
      } catch (const std::exception& e) {
        return std::string("!") + e.what();
      }
    });
    pool.run(
        [&]() -> std::optional<PoolItem> {
          if (next >= static_cast<int64_t>(to_verify.size())) return std::nullopt;
          PoolItem job;
          job.id = next++;
          return job;
        },
        [&](const PoolItem& job, PoolResult&& result) {
          ++finished;
          if (progress) progress->update(finished);
          if (!result.ok() || result.response != "ok")
            failures.push_back(to_verify[static_cast<size_t>(job.id)]->problem.id + ": " +
                               (result.status == PoolStatus::ok ? result.response.substr(1)
                                : result.status == PoolStatus::failed
                                    ? "internal_error: " + result.error
                                    : std::string("worker crashed")));
        });
    if (progress) progress->finish();
    if (!failures.empty())
      throw Error(
          "demo data: " + std::to_string(failures.size()) +
          " compact targets do not re-solve to the recorded optimum; first: " + failures[0]);
    summary.verified_solves = static_cast<int64_t>(to_verify.size());
  }

  // Files.
  namespace fs = std::filesystem;
  fs::create_directories(o.out_dir);
  fs::create_directories(o.out_dir + "/prompts");
  fs::create_directories(o.out_dir + "/gold");
  auto chats = [&](const std::vector<const DemoItem*>& items, const std::string& split) {
    std::vector<json> out;
    for (const auto* it : items) out.push_back(chat_record(*it, split));
    return out;
  };
  write_jsonl(o.out_dir + "/sft_train.jsonl", chats(train, "sft_train"));
  write_jsonl(o.out_dir + "/sft_val.jsonl", chats(val, "sft_val"));
  const std::vector<std::pair<std::string, const std::vector<const DemoItem*>*>> eval_splits = {
      {"test", &test},
      {"heldout_template", &ho_template},
      {"heldout_family", &ho_family},
      {"val", &val}};
  for (const auto& [name, items] : eval_splits) {
    std::vector<json> bench, prompts, gold;
    for (const auto* it : *items) {
      bench.push_back(bench_record(*it, name));
      prompts.push_back(prompt_record(it->problem.id, name, it->problem.nl));
      gold.push_back({{"id", it->problem.id}, {"source", name}, {"completion", it->target.text}});
    }
    write_jsonl(o.out_dir + "/" + name + ".jsonl", bench);
    write_jsonl(o.out_dir + "/prompts/" + name + ".jsonl", prompts);
    write_jsonl(o.out_dir + "/gold/" + name + ".jsonl", gold);
    summary.split_sizes[name] = static_cast<int64_t>(items->size());
  }
  summary.split_sizes["sft_train"] = static_cast<int64_t>(train.size());
  summary.split_sizes["sft_val"] = static_cast<int64_t>(val.size());
  // The SFT training problems as benchmark records: the prompts of a GRPO stage
  // (docs/rl.md), which trains on the problems SFT saw and is evaluated on the splits above.
  {
    std::vector<json> rl_prompts;
    for (const auto* it : train) rl_prompts.push_back(bench_record(*it, "rl_train"));
    write_jsonl(o.out_dir + "/rl_train.jsonl", rl_prompts);
  }

  std::vector<json> pub = public_slice(o);
  if (!pub.empty()) {
    std::vector<json> prompts;
    for (const auto& r : pub) {
      prompts.push_back(
          prompt_record(r["id"].get<std::string>(), "public", r["question"].get<std::string>()));
      summary.public_sources.push_back(r["id"].get<std::string>());
    }
    write_jsonl(o.out_dir + "/public.jsonl", pub);
    write_jsonl(o.out_dir + "/prompts/public.jsonl", prompts);
  }
  summary.split_sizes["public"] = static_cast<int64_t>(pub.size());

  // CPT corpus: the trained problems (SFT train + CPT-only extra) as question ->
  // model pairs and as formulation documents, shuffled by seed.
  std::vector<json> cpt;
  for (const auto* list : {&train, &cpt_only})
    for (const auto* it : *list) {
      cpt.push_back({{"text", it->prompt + "\n\n" + it->target.text},
                     {"meta",
                      {{"kind", "question_model"},
                       {"problem_id", it->problem.id},
                       {"family", it->problem.family}}}});
      cpt.push_back({{"text", it->problem.nl + "\n\n" + it->problem.alg + "\n\n```mathprog\n" +
                                  it->problem.gmpl + "```"},
                     {"meta",
                      {{"kind", "formulation"},
                       {"problem_id", it->problem.id},
                       {"family", it->problem.family}}}});
      // Drills keep the names as generated: on renamed drills the copy did not
      // form within the default warm-up (docs/demo.md "Renamed entities").
      const DemoItem& drilled = it->before_renaming ? *it->before_renaming : *it;
      constexpr std::string_view data_marker = "\ndata;";
      const std::string& target = drilled.target.text;
      const size_t data_at = target.find(data_marker);
      if (o.sizes.copy_drills > 0 && data_at != std::string::npos) {
        for (std::string& drill :
             copy_drills(drilled.problem.nl, target.substr(data_at + data_marker.size()),
                         o.sizes.copy_drills, hash_combine(o.seed, hash_string(it->problem.id))))
          cpt.push_back({{"text", std::move(drill)},
                         {"meta",
                          {{"kind", "copy_drill"},
                           {"problem_id", it->problem.id},
                           {"family", it->problem.family}}}});
      }
    }
  Rng shuffle_rng(o.seed, {hash_string("demo-cpt-shuffle")});
  shuffle_rng.shuffle(cpt);
  write_jsonl(o.out_dir + "/cpt.jsonl", cpt);
  summary.cpt_documents = static_cast<int64_t>(cpt.size());
  for (const auto& d : cpt)
    summary.cpt_bytes += static_cast<int64_t>(d["text"].get<std::string>().size());

  // Lengths, order figures, benchmark overlap of what is trained on.
  double prompt_chars = 0, target_chars = 0;
  for (const auto* it : train) {
    prompt_chars += static_cast<double>(it->prompt.size());
    target_chars += static_cast<double>(it->target.text.size());
    summary.max_total_chars =
        std::max(summary.max_total_chars, it->prompt.size() + it->target.text.size());
  }
  summary.mean_prompt_chars = prompt_chars / static_cast<double>(train.size());
  summary.mean_target_chars = target_chars / static_cast<double>(train.size());
  for (const auto& [family, sums] : order_sums) {
    const double n = static_cast<double>(order_counts[family]);
    summary.order_before[family] = std::round(sums.first / n * 1e4) / 1e4;
    summary.order_after[family] = std::round(sums.second / n * 1e4) / 1e4;
  }
  {
    std::map<std::string, std::vector<std::string>> questions;
    std::map<std::string, TextFormCounter> forms;
    for (const auto* it : train) {
      questions[it->problem.family].push_back(it->problem.nl);
      forms[it->problem.family].add(it->problem.nl_template, it->problem.surface_form);
    }
    for (const auto& [family, texts] : questions) {
      summary.family_diversity[family] = ngram_diversity(texts, o.seed);
      summary.family_forms[family] = forms[family].counts();
    }
    if (bench_index) summary.bench_diversity = benchmark_diversity(o.bench_dir, o.seed);
  }
  if (bench_index)
    for (const auto* it : train)
      summary.max_bench_overlap =
          std::max(summary.max_bench_overlap,
                   bench_index->max_overlap(it->prompt + "\n" + it->target.text).fraction);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json s = summary.to_json();
  s["preset"] = o.preset;
  s["seed"] = o.seed;
  s["difficulty"] = o.difficulty;
  s["sizes"] = {{"sft_train", z.sft_train},
                {"sft_val", z.sft_val},
                {"test", z.test},
                {"heldout_template", z.heldout_template},
                {"heldout_family", z.heldout_family},
                {"public_items", z.public_items},
                {"cpt_problems", z.cpt_problems},
                {"side_constraint_rate", z.side_constraint_rate},
                {"max_chars", z.max_chars},
                {"copy_drills", z.copy_drills}};
  s.erase("seconds");  // wall time would make summary.json differ between identical runs
  write_file_atomic(o.out_dir + "/summary.json", s.dump(2) + "\n");
  return summary;
}

}  // namespace trex::demo
