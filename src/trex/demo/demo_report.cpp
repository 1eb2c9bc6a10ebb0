#include "trex/demo/demo_report.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"

namespace trex::demo {

namespace {

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Coordinates with two decimals: short, and exact enough for a chart.
std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Tick label: as few digits as the step needs.
std::string tick_label(double v, double step) {
  int decimals = 0;
  while (decimals < 6 && std::fabs(step * std::pow(10.0, decimals) -
                                   std::round(step * std::pow(10.0, decimals))) > 1e-6)
    ++decimals;
  if (std::fabs(v) < step * 1e-9) v = 0.0;
  return format_fixed(v, decimals);
}

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::optional<double> number_field(const nlohmann::json& r, const char* name) {
  auto it = r.find(name);
  if (it == r.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

// Fixed decimals, zeros kept (format_fixed trims them).
std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
std::string percent(double v) {
  return fixed(v, 1);
}

}  // namespace

std::vector<CurveSeries> read_loss_series(const std::string& metrics_path,
                                          const std::string& prefix) {
  if (!std::filesystem::exists(metrics_path))
    throw Error("metrics file not found").file(metrics_path);
  CurveSeries train{prefix + " train", {}, false};
  CurveSeries val{prefix + " val", {}, true};
  long position = 0;
  read_jsonl(metrics_path, [&](const nlohmann::json& r, long line) {
    if (!r.is_object()) throw Error("record is not a JSON object").file(metrics_path).line(line);
    const double x = number_field(r, "step").value_or(static_cast<double>(position));
    ++position;
    if (auto loss = number_field(r, "loss")) {
      train.points.push_back({x, *loss});
    } else if (auto lm = number_field(r, "lm_loss")) {
      train.points.push_back({x, *lm});
    }
    if (auto v = number_field(r, "val_loss")) val.points.push_back({x, *v});
  });
  std::vector<CurveSeries> out;
  if (!train.points.empty()) out.push_back(std::move(train));
  if (!val.points.empty()) out.push_back(std::move(val));
  return out;
}

AxisTicks nice_ticks(double lo, double hi, int target_ticks) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    const double pad = std::max(0.5, std::fabs(hi) * 0.05);
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target_ticks);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw - 1e-12 * raw) {
      step = m * magnitude;
      break;
    }
  AxisTicks t;
  t.step = step;
  t.lo = std::floor(lo / step + 1e-9) * step;
  t.hi = std::ceil(hi / step - 1e-9) * step;
  return t;
}

std::string loss_curves_svg(const std::vector<CurveSeries>& series, const SvgChart& c) {
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  double ymin = xmin, ymax = -xmin;
  for (const auto& s : series)
    for (const auto& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      xmin = std::min(xmin, p.x);
      xmax = std::max(xmax, p.x);
      ymin = std::min(ymin, p.y);
      ymax = std::max(ymax, p.y);
    }
  const bool empty = !std::isfinite(xmin);
  const AxisTicks xt = empty ? AxisTicks{} : nice_ticks(xmin, xmax);
  const AxisTicks yt = empty ? AxisTicks{} : nice_ticks(ymin, ymax);
  const double left = c.margin_left, top = c.margin_top;
  const double plot_w = c.width - c.margin_left - c.margin_right;
  const double plot_h = c.height - c.margin_top - c.margin_bottom;
  const double bottom = top + plot_h, right = left + plot_w;
  auto sx = [&](double x) { return left + (x - xt.lo) / (xt.hi - xt.lo) * plot_w; };
  auto sy = [&](double y) { return top + (yt.hi - y) / (yt.hi - yt.lo) * plot_h; };

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(c.width) +
         "\" height=\"" + std::to_string(c.height) + "\" viewBox=\"0 0 " + std::to_string(c.width) +
         " " + std::to_string(c.height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(c.width) + "\" height=\"" +
         std::to_string(c.height) + "\" fill=\"white\"/>\n";
  if (!c.title.empty())
    svg += "<text x=\"" + px(left + plot_w / 2) + "\" y=\"" + px(top / 2 + 6) +
           "\" text-anchor=\"middle\" font-size=\"15\">" + xml_escape(c.title) + "</text>\n";
  // Grid and ticks.
  svg += "<g class=\"grid\" stroke=\"#e0e0e0\" stroke-width=\"1\">\n";
  std::string labels;
  for (double v = xt.lo; v <= xt.hi + xt.step * 1e-6; v += xt.step) {
    const double x = sx(v);
    svg += "<line x1=\"" + px(x) + "\" y1=\"" + px(top) + "\" x2=\"" + px(x) + "\" y2=\"" +
           px(bottom) + "\"/>\n";
    labels += "<text class=\"xtick\" x=\"" + px(x) + "\" y=\"" + px(bottom + 16) +
              "\" text-anchor=\"middle\">" + tick_label(v, xt.step) + "</text>\n";
  }
  for (double v = yt.lo; v <= yt.hi + yt.step * 1e-6; v += yt.step) {
    const double y = sy(v);
    svg += "<line x1=\"" + px(left) + "\" y1=\"" + px(y) + "\" x2=\"" + px(right) + "\" y2=\"" +
           px(y) + "\"/>\n";
    labels += "<text class=\"ytick\" x=\"" + px(left - 6) + "\" y=\"" + px(y + 4) +
              "\" text-anchor=\"end\">" + tick_label(v, yt.step) + "</text>\n";
  }
  svg += "</g>\n" + labels;
  // Axes and their labels.
  svg += "<line x1=\"" + px(left) + "\" y1=\"" + px(bottom) + "\" x2=\"" + px(right) + "\" y2=\"" +
         px(bottom) + "\" stroke=\"black\"/>\n";
  svg += "<line x1=\"" + px(left) + "\" y1=\"" + px(top) + "\" x2=\"" + px(left) + "\" y2=\"" +
         px(bottom) + "\" stroke=\"black\"/>\n";
  svg += "<text x=\"" + px(left + plot_w / 2) + "\" y=\"" + px(c.height - 12.0) +
         "\" text-anchor=\"middle\">" + xml_escape(c.x_label) + "</text>\n";
  svg += "<text x=\"16\" y=\"" + px(top + plot_h / 2) +
         "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " + px(top + plot_h / 2) + ")\">" +
         xml_escape(c.y_label) + "</text>\n";
  if (empty)
    svg += "<text x=\"" + px(left + plot_w / 2) + "\" y=\"" + px(top + plot_h / 2) +
           "\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n";
  // Series, then the legend (top right, inside the plot).
  size_t index = 0;
  std::string legend;
  for (const auto& s : series) {
    const std::string color = kPalette[index % (sizeof kPalette / sizeof kPalette[0])];
    std::string points;
    size_t count = 0;
    for (const auto& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      points += (count++ ? " " : "") + px(sx(p.x)) + "," + px(sy(p.y));
    }
    if (count > 0) {
      svg += "<polyline class=\"series\" data-label=\"" + xml_escape(s.label) +
             "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.8\"" +
             (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + points + "\"/>\n";
      if (count == 1) {
        const auto comma = points.find(',');
        svg += "<circle cx=\"" + points.substr(0, comma) + "\" cy=\"" + points.substr(comma + 1) +
               "\" r=\"3\" fill=\"" + color + "\"/>\n";
      }
    }
    const double ly = top + 14 + 18.0 * static_cast<double>(index);
    legend += "<line x1=\"" + px(right - 150) + "\" y1=\"" + px(ly - 4) + "\" x2=\"" +
              px(right - 126) + "\" y2=\"" + px(ly - 4) + "\" stroke=\"" + color +
              "\" stroke-width=\"2\"" + (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
    legend += "<text x=\"" + px(right - 120) + "\" y=\"" + px(ly) + "\">" + xml_escape(s.label) +
              "</text>\n";
    ++index;
  }
  if (!series.empty())
    svg += "<rect x=\"" + px(right - 158) + "\" y=\"" + px(top + 2) + "\" width=\"154\" height=\"" +
           px(18.0 * static_cast<double>(series.size()) + 6) +
           "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n" + legend;
  svg += "</svg>\n";
  return svg;
}

Pass1Cell read_pass1(const std::string& path, const std::string& split) {
  Pass1Cell cell;
  if (!std::filesystem::exists(path)) throw Error("eval report not found").file(path);
  nlohmann::json r;
  try {
    r = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("not a JSON report: ") + e.what()).file(path);
  }
  const nlohmann::json* entry = nullptr;
  if (auto b = r.find("benchmarks"); b != r.end() && b->is_object()) {
    if (auto s = b->find(split); s != b->end()) {
      entry = &*s;
    } else if (b->size() == 1) {
      entry = &b->begin().value();
    }
  }
  if (entry == nullptr)
    if (auto m = r.find("micro"); m != r.end() && m->is_object()) entry = &*m;
  if (entry == nullptr || !entry->contains("pass@1") || !(*entry)["pass@1"].is_number())
    throw Error("report has no pass@1 for split '" + split + "'").file(path).field("pass@1");
  cell.present = true;
  cell.pass1 = (*entry)["pass@1"].get<double>();
  if (auto n = entry->find("n"); n != entry->end() && n->is_number()) cell.n = n->get<int64_t>();
  if (auto e = entry->find("execution_rate"); e != entry->end() && e->is_number())
    cell.execution_rate = e->get<double>();
  return cell;
}

namespace {

// The lines of a completion's data section (`data;` to `end;`, exclusive),
// whitespace collapsed; empty when there is none.
std::vector<std::string> data_section_lines(const std::string& completion) {
  std::vector<std::string> out;
  const size_t start = completion.find("data;");
  if (start == std::string::npos) return out;
  const size_t stop = completion.find("end;", start);
  const std::string body = completion.substr(
      start + 5, stop == std::string::npos ? std::string::npos : stop - start - 5);
  size_t from = 0;
  while (from <= body.size()) {
    size_t nl = body.find('\n', from);
    if (nl == std::string::npos) nl = body.size();
    std::string line;
    bool space = false;
    for (size_t i = from; i < nl; ++i) {
      const char c = body[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        space = !line.empty();
      } else {
        if (space) line += ' ';
        space = false;
        line += c;
      }
    }
    if (!line.empty()) out.push_back(line);
    from = nl + 1;
  }
  return out;
}

// id -> first completion of a completions or gold JSONL file.
std::map<std::string, std::string> first_completions(const std::string& path) {
  std::map<std::string, std::string> out;
  read_jsonl(path, [&](const nlohmann::json& r, long line) {
    auto id = r.find("id");
    if (id == r.end() || !id->is_string())
      throw Error("expected a string id").file(path).line(line).field("id");
    if (auto c = r.find("completion"); c != r.end() && c->is_string()) {
      out[id->get<std::string>()] = c->get<std::string>();
    } else if (auto cs = r.find("completions");
               cs != r.end() && cs->is_array() && !cs->empty() && (*cs)[0].is_string()) {
      out[id->get<std::string>()] = (*cs)[0].get<std::string>();
    } else {
      throw Error("expected a completion string or a non-empty completions array")
          .file(path)
          .line(line)
          .field("completion");
    }
  });
  return out;
}

}  // namespace

DataLineRecall data_line_recall(const std::string& completions_path, const std::string& gold_path) {
  const auto generated = first_completions(completions_path);
  DataLineRecall r;
  for (const auto& [id, gold] : first_completions(gold_path)) {
    const std::vector<std::string> want = data_section_lines(gold);
    ++r.items;
    r.lines += static_cast<int64_t>(want.size());
    auto it = generated.find(id);
    if (it == generated.end()) continue;
    std::vector<std::string> have = data_section_lines(it->second);
    if (have == want) ++r.exact_items;
    std::multiset<std::string> pool(have.begin(), have.end());
    for (const auto& line : want)
      if (auto hit = pool.find(line); hit != pool.end()) {
        ++r.reproduced;
        pool.erase(hit);
      }
  }
  return r;
}

namespace {

// "Headline: zero-shot Pass@1 on the N held-out test problems went from B % ..."
std::string headline_gain(const DemoReportInputs& in) {
  Pass1Cell base, sft;
  if (auto it = in.base_reports.find(in.headline_split); it != in.base_reports.end())
    base = read_pass1(it->second, in.headline_split);
  if (auto it = in.sft_reports.find(in.headline_split); it != in.sft_reports.end())
    sft = read_pass1(it->second, in.headline_split);
  if (!base.present || !sft.present)
    return "The Pass@1 of both models on the " + in.headline_split +
           " split is not available (see the table below).";
  const double gain = sft.pass1 - base.pass1;
  std::string out = "Headline: zero-shot Pass@1 on the " + std::to_string(sft.n) +
                    " problems of the " + in.headline_split +
                    " split (unseen instances of the trained problem kinds) went from " +
                    percent(base.pass1) + " % for the CPT-only base to " + percent(sft.pass1) +
                    " % after SFT (" + (gain >= 0 ? "+" : "") + percent(gain) + " points)";
  Pass1Cell rl;
  if (auto it = in.rl_reports.find(in.headline_split); it != in.rl_reports.end())
    rl = read_pass1(it->second, in.headline_split);
  if (rl.present)
    out += " and " + percent(rl.pass1) + " % after GRPO (" + (rl.pass1 >= sft.pass1 ? "+" : "") +
           percent(rl.pass1 - sft.pass1) + " points over SFT)";
  return out + ".";
}

}  // namespace

std::string demo_report_markdown(const DemoReportInputs& in) {
  std::string md = "# " + in.title + "\n\n";
  if (!in.what_was_trained.empty()) md += in.what_was_trained + " " + headline_gain(in) + "\n\n";
  md += "## Pass@1 (zero-shot, graded by `trex or eval`)\n\n";
  const bool with_rl = !in.rl_reports.empty();
  md += with_rl ? "| split | n | CPT-only base | SFT model | SFT - base | RL model | RL - SFT |\n"
                  "|---|---|---|---|---|---|---|\n"
                : "| split | n | CPT-only base | SFT model | SFT - base |\n|---|---|---|---|---|\n";
  auto difference = [](const Pass1Cell& a, const Pass1Cell& b) {
    return a.present && b.present ? (a.pass1 >= b.pass1 ? "+" : "") + percent(a.pass1 - b.pass1)
                                  : std::string("-");
  };
  for (const auto& split : in.splits) {
    Pass1Cell base, sft, rl;
    if (auto it = in.base_reports.find(split); it != in.base_reports.end())
      base = read_pass1(it->second, split);
    if (auto it = in.sft_reports.find(split); it != in.sft_reports.end())
      sft = read_pass1(it->second, split);
    if (auto it = in.rl_reports.find(split); it != in.rl_reports.end())
      rl = read_pass1(it->second, split);
    const int64_t n = sft.present ? sft.n : base.n;
    md += "| " + split + " | " + (base.present || sft.present ? std::to_string(n) : "-") + " | " +
          (base.present ? percent(base.pass1) : "-") + " | " +
          (sft.present ? percent(sft.pass1) : "-") + " | " + difference(sft, base) + " |";
    if (with_rl)
      md += " " + (rl.present ? percent(rl.pass1) : std::string("-")) + " | " +
            difference(rl, sft) + " |";
    md += "\n";
  }
  md += "\nPass@1 in percent (one sample per item); `-`: not evaluated.\n";
  if (!in.base_data_lines.empty() || !in.sft_data_lines.empty()) {
    md +=
        "\nReference data-section lines reproduced (percent): how much of the question's data "
        "the models copy, a finer signal than Pass@1 (one wrong value fails an item).\n\n"
        "| split | CPT-only base | SFT model |\n|---|---|---|\n";
    for (const auto& split : in.splits) {
      auto b = in.base_data_lines.find(split);
      auto f = in.sft_data_lines.find(split);
      if (b == in.base_data_lines.end() && f == in.sft_data_lines.end()) continue;
      md += "| " + split + " | " + (b != in.base_data_lines.end() ? percent(b->second) : "-") +
            " | " + (f != in.sft_data_lines.end() ? percent(f->second) : "-") + " |\n";
    }
  }

  if (!in.figures.empty()) {
    md += "\n## Training throughput and MFU\n\n| figure | value |\n|---|---|\n";
    for (const auto& [name, value] : in.figures) md += "| " + name + " | " + value + " |\n";
  }
  if (!in.charts.empty()) {
    md += "\n## Loss curves\n\n";
    for (const auto& [caption, file] : in.charts) md += "![" + caption + "](" + file + ")\n\n";
  }
  const auto& d = in.data_summary;
  if (d.is_object()) {
    md += "\n## Data\n\n";
    auto list = [&](const char* key) {
      std::vector<std::string> out;
      if (auto it = d.find(key); it != d.end() && it->is_array())
        for (const auto& v : *it)
          if (v.is_string()) out.push_back(v.get<std::string>());
      return join(out, ", ");
    };
    md += "- trained families: " + list("train_families") + "\n";
    md += "- held-out families: " + list("heldout_families") + "\n";
    if (auto t = d.find("heldout_templates"); t != d.end() && t->is_object()) {
      std::vector<std::string> parts;
      for (auto it = t->begin(); it != t->end(); ++it) parts.push_back(it.key() + " " + it->dump());
      md += "- held-out template per family: " + join(parts, ", ") + "\n";
    }
    if (auto v = d.find("cpt_documents"); v != d.end() && v->is_number())
      md += "- CPT corpus: " + v->dump() + " documents, " +
            d.value("cpt_bytes", nlohmann::json(0)).dump() + " bytes\n";
    if (auto v = d.find("mean_prompt_chars"); v != d.end() && v->is_number())
      md += "- SFT train lengths: prompt " + format_fixed(v->get<double>(), 0) + " chars, target " +
            format_fixed(d.value("mean_target_chars", 0.0), 0) + " chars (means), longest pair " +
            d.value("max_total_chars", nlohmann::json(0)).dump() + " chars\n";
    if (auto v = d.find("diversity"); v != d.end() && v->is_object()) {
      // "name share (templates, surface forms)" per family, then per benchmark file.
      auto figures = [&](const char* key) {
        std::vector<std::string> parts;
        if (auto g = v->find(key); g != v->end() && g->is_object())
          for (auto it = g->begin(); it != g->end(); ++it) {
            std::string part = it.key() + " " + fixed(it->value("share", 0.0), 3);
            if (it->contains("templates")) {
              part += " (" + (*it)["templates"].dump() + " templates";
              if (it->contains("surface_forms"))
                part += ", " + (*it)["surface_forms"].dump() + " forms in " +
                        it->value("all_texts", nlohmann::json(0)).dump() + " texts";
              part += ")";
            }
            parts.push_back(part);
          }
        return parts.empty() ? std::string("-") : join(parts, ", ");
      };
      md += "- question diversity (distinct word " + v->value("ngram", nlohmann::json(4)).dump() +
            "-grams / all, samples of up to " + v->value("sample", nlohmann::json(200)).dump() +
            " questions): trained " + figures("families") + "; benchmarks " +
            figures("benchmarks") + "\n";
    }
    if (auto r = d.find("renamed_entities"); r != d.end() && r->is_object()) {
      int64_t renamed = 0;
      std::vector<std::string> parts;
      if (auto b = r->find("by_source"); b != r->end() && b->is_object())
        for (auto it = b->begin(); it != b->end(); ++it) {
          renamed += it->get<int64_t>();
          parts.push_back(it->dump() + " " + it.key());
        }
      md += "- renamed entities (trained problems whose named things carry other names): " +
            std::to_string(renamed) + (parts.empty() ? "" : " (" + join(parts, ", ") + ")") + ", " +
            r->value("not_renamed", nlohmann::json(0)).dump() +
            " drawn but not renamable cleanly\n";
    }
    if (auto s = d.find("split_sizes"); s != d.end() && s->is_object()) {
      md += "\n| split | items |\n|---|---|\n";
      for (auto it = s->begin(); it != s->end(); ++it)
        md += "| " + it.key() + " | " + it->dump() + " |\n";
    }
    auto before = d.find("data_order_before");
    auto after = d.find("data_order_after");
    if (before != d.end() && after != d.end() && before->is_object() && after->is_object()) {
      md +=
          "\nData values found in the question in the same order (mean fraction): the family's "
          "own data section vs the demo's reordered one.\n\n| family | family's order | demo "
          "order |\n|---|---|---|\n";
      for (auto it = after->begin(); it != after->end(); ++it)
        md += "| " + it.key() + " | " +
              (before->contains(it.key()) ? fixed((*before)[it.key()].get<double>(), 3) : "-") +
              " | " + fixed(it->get<double>(), 3) + " |\n";
    }
  }
  if (!in.notes.empty()) md += "\n## Notes\n\n" + in.notes + "\n";
  return md;
}

void write_demo_report(const std::string& path, const DemoReportInputs& inputs) {
  write_file_atomic(path, demo_report_markdown(inputs));
}

}  // namespace trex::demo
