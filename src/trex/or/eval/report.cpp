#include "trex/or/eval/report.hpp"

#include <cstdio>

#include "trex/core/strings.hpp"

namespace trex::orlib::eval {
namespace {

std::string pct(const nlohmann::json& v) {
  if (!v.is_number()) return "–";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v.get<double>());
  return buf;
}

std::string num(const nlohmann::json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return format_fixed(v.get<double>(), 3);
  if (v.is_string()) return v.get<std::string>();
  return "–";
}

std::string escape_cell(std::string s) {
  s = replace_all(std::move(s), "|", "\\|");
  return replace_all(std::move(s), "\n", " ");
}

nlohmann::json score_block(const std::vector<const ItemTally*>& items, int k) {
  nlohmann::json j;
  j["n"] = items.size();
  j["pass@1"] = pass1_percent(items);
  if (k > 1) {
    int64_t excluded = 0;
    j["pass@" + std::to_string(k)] = passk_percent(items, k, excluded);
    j["pass@" + std::to_string(k) + "_excluded"] = excluded;
  }
  return j;
}

}  // namespace

double pass1_percent(const std::vector<const ItemTally*>& items) {
  if (items.empty()) return 0.0;
  double sum = 0.0;
  for (const ItemTally* t : items)
    if (t->n > 0) sum += static_cast<double>(t->c) / t->n;
  return 100.0 * sum / static_cast<double>(items.size());
}

double passk_percent(const std::vector<const ItemTally*>& items, int k, int64_t& excluded) {
  excluded = 0;
  double sum = 0.0;
  int64_t counted = 0;
  for (const ItemTally* t : items) {
    if (t->n == 0) {
      ++counted;
      continue;
    }
    if (t->n < k) {
      ++excluded;
      continue;
    }
    sum += pass_at_k(t->n, t->c, k);
    ++counted;
  }
  return counted > 0 ? 100.0 * sum / static_cast<double>(counted) : 0.0;
}

nlohmann::json build_report(const std::vector<BenchTally>& benches, int k,
                            const nlohmann::json& extra) {
  nlohmann::json report = nlohmann::json::object();
  nlohmann::json bj = nlohmann::json::object();
  std::vector<const ItemTally*> all_items;
  std::array<int64_t, kNumCategories> totals{};
  int64_t total_samples = 0, executed_samples = 0;
  double macro1 = 0.0, macrok = 0.0;
  int macro_count = 0;
  const std::string kkey = "pass@" + std::to_string(k);
  for (const BenchTally& b : benches) {
    std::vector<const ItemTally*> items;
    for (const auto& t : b.items) items.push_back(&t);
    all_items.insert(all_items.end(), items.begin(), items.end());
    nlohmann::json j = score_block(items, k);
    j["file"] = b.path;
    j["samples"] = b.samples;
    j["excluded_unknown"] = b.excluded_unknown;
    j["missing"] = b.missing;
    j["no_solution_items"] = b.no_solution_items;
    int64_t executed_here = 0;
    nlohmann::json errors = nlohmann::json::object();
    for (Category c : all_categories()) {
      int64_t count = b.categories[static_cast<size_t>(c)];
      errors[to_string(c)] = count;
      totals[static_cast<size_t>(c)] += count;
      if (executed(c)) executed_here += count;
    }
    j["errors"] = errors;
    j["execution_rate"] =
        b.samples > 0 ? 100.0 * static_cast<double>(executed_here) / static_cast<double>(b.samples)
                      : 0.0;
    total_samples += b.samples;
    executed_samples += executed_here;
    if (b.has_types) {
      std::map<std::string, std::vector<const ItemTally*>> by_type;
      for (const ItemTally* t : items)
        by_type[t->problem_type.empty() ? "(none)" : t->problem_type].push_back(t);
      nlohmann::json types = nlohmann::json::object();
      for (const auto& [type, list] : by_type) types[type] = score_block(list, k);
      j["by_type"] = types;
    }
    if (!items.empty()) {
      macro1 += j["pass@1"].get<double>();
      if (k > 1) macrok += j[kkey].get<double>();
      ++macro_count;
    }
    bj[b.name] = j;
  }
  report["benchmarks"] = bj;
  nlohmann::json macro;
  macro["benchmarks"] = macro_count;
  macro["pass@1"] = macro_count ? macro1 / macro_count : 0.0;
  if (k > 1) macro[kkey] = macro_count ? macrok / macro_count : 0.0;
  report["macro"] = macro;
  report["micro"] = score_block(all_items, k);
  nlohmann::json errors = nlohmann::json::object();
  for (Category c : all_categories()) errors[to_string(c)] = totals[static_cast<size_t>(c)];
  report["errors"] = errors;
  report["samples"] = total_samples;
  report["execution_rate"] = total_samples > 0 ? 100.0 * static_cast<double>(executed_samples) /
                                                     static_cast<double>(total_samples)
                                               : 0.0;
  report["k"] = k;
  for (auto it = extra.begin(); it != extra.end(); ++it) report[it.key()] = it.value();
  return report;
}

std::string render_markdown(const nlohmann::json& report) {
  const int k = report.value("k", 1);
  const std::string kkey = "pass@" + std::to_string(k);
  std::string md = "# OR evaluation report\n\n";
  if (report.contains("settings")) {
    const auto& s = report["settings"];
    md += "Rule `" + s.value("rule", std::string("?")) +
          "`: " + s.value("rule_description", std::string()) + ".  \n";
    md += "Timeout " + num(s.value("timeout_s", nlohmann::json())) + " s, " +
          num(s.value("jobs", nlohmann::json())) + " jobs, format " +
          s.value("format", std::string("auto")) + ", MathProg/LP solver " +
          s.value("solver", std::string("glpk")) + ".\n\n";
  }
  md += "Pass@1 is the mean over scoreable items of (correct samples / samples), in percent";
  if (k > 1)
    md += "; Pass@" + std::to_string(k) + " is the unbiased estimator of Chen et al. (2021)";
  md +=
      ". Items without a ground truth are excluded; items without completions count as wrong.\n\n";

  md += "## Scores\n\n| benchmark | n | pass@1 |";
  if (k > 1) md += " " + kkey + " |";
  md += " exec rate | samples | excluded (no truth) | missing |\n|---|---|---|";
  if (k > 1) md += "---|";
  md += "---|---|---|---|\n";
  for (auto it = report["benchmarks"].begin(); it != report["benchmarks"].end(); ++it) {
    const auto& b = it.value();
    md += "| " + escape_cell(it.key()) + " | " + num(b["n"]) + " | " + pct(b["pass@1"]) + " |";
    if (k > 1) md += " " + pct(b.value(kkey, nlohmann::json())) + " |";
    md += " " + pct(b["execution_rate"]) + " | " + num(b["samples"]) + " | " +
          num(b["excluded_unknown"]) + " | " + num(b["missing"]) + " |\n";
  }
  md += "| **macro** (" + num(report["macro"]["benchmarks"]) + " files) | | " +
        pct(report["macro"]["pass@1"]) + " |";
  if (k > 1) md += " " + pct(report["macro"].value(kkey, nlohmann::json())) + " |";
  md += " | | | |\n";
  md +=
      "| **micro** | " + num(report["micro"]["n"]) + " | " + pct(report["micro"]["pass@1"]) + " |";
  if (k > 1) md += " " + pct(report["micro"].value(kkey, nlohmann::json())) + " |";
  md += " " + pct(report["execution_rate"]) + " | " + num(report["samples"]) + " | | |\n\n";

  md += "## Error taxonomy (samples)\n\n| benchmark |";
  for (Category c : all_categories()) md += std::string(" ") + to_string(c) + " |";
  md += "\n|---|";
  for (size_t i = 0; i < kNumCategories; ++i) md += "---|";
  md += "\n";
  for (auto it = report["benchmarks"].begin(); it != report["benchmarks"].end(); ++it) {
    md += "| " + escape_cell(it.key()) + " |";
    for (Category c : all_categories()) md += " " + num(it.value()["errors"][to_string(c)]) + " |";
    md += "\n";
  }
  md += "| **total** |";
  for (Category c : all_categories()) md += " " + num(report["errors"][to_string(c)]) + " |";
  md += "\n\n";

  bool any_types = false;
  for (auto it = report["benchmarks"].begin(); it != report["benchmarks"].end(); ++it)
    any_types = any_types || it.value().contains("by_type");
  if (any_types) {
    md += "## By problem type\n\n| benchmark | type | n | pass@1 |";
    if (k > 1) md += " " + kkey + " |";
    md += "\n|---|---|---|---|";
    if (k > 1) md += "---|";
    md += "\n";
    for (auto it = report["benchmarks"].begin(); it != report["benchmarks"].end(); ++it) {
      if (!it.value().contains("by_type")) continue;
      for (auto t = it.value()["by_type"].begin(); t != it.value()["by_type"].end(); ++t) {
        md += "| " + escape_cell(it.key()) + " | " + escape_cell(t.key()) + " | " +
              num(t.value()["n"]) + " | " + pct(t.value()["pass@1"]) + " |";
        if (k > 1) md += " " + pct(t.value().value(kkey, nlohmann::json())) + " |";
        md += "\n";
      }
    }
    md += "\n";
  }
  if (report.contains("join")) {
    const auto& j = report["join"];
    md += "## Completions\n\n" + num(j["records"]) + " records, " + num(j["samples"]) +
          " samples joined (" + num(j["by_id"]) + " by id, " + num(j["by_question"]) +
          " by question); " + num(j["unmatched"]) + " unmatched, " + num(j["ambiguous"]) +
          " ambiguous.\n\n";
  }
  if (report.contains("input")) {
    const auto& in = report["input"];
    std::string lines;
    auto file_line = [&](const nlohmann::json& f) {
      if (f.value("skipped", 0) == 0 && f.value("repaired", 0) == 0) return;
      lines += "- " + escape_cell(f.value("path", std::string())) + ": " + num(f["records"]) +
               " records, " + num(f["skipped"]) + " lines skipped, " + num(f["repaired"]) +
               " repaired (" + num(f["replacements"]) + " characters replaced by U+FFFD)\n";
      for (const auto& k : f["skipped_lines"])
        lines += "  - line " + num(k["line"]) + ": " + escape_cell(k.value("reason", "")) + "\n";
    };
    for (const auto& f : in.value("benchmarks", nlohmann::json::array())) file_line(f);
    if (in.contains("completions")) file_line(in["completions"]);
    if (!lines.empty())
      md += "## Input\n\n" + num(in["skipped_lines"]) + " lines skipped, " +
            num(in["repaired_records"]) + " records repaired:\n\n" + lines + "\n";
  }
  if (report.contains("isolation")) {
    md += "## Isolation\n\n" + report["isolation"].value("summary", std::string()) + ".\n\n";
  }
  if (report.contains("timing")) {
    const auto& t = report["timing"];
    md += "## Timing\n\n" + num(t.value("seconds", nlohmann::json())) + " s wall, " +
          num(t.value("samples_per_second", nlohmann::json())) + " samples/s; harness peak RSS " +
          num(t.value("harness_peak_rss_kb", nlohmann::json())) + " KiB.\n";
  }
  return md;
}

}  // namespace trex::orlib::eval
