#pragma once
// The report of `trex demo`: loss curves as standalone SVG (hand-written:
// axes, ticks, labels, legend, several series) read from training metrics
// JSONL files, and report.md with the Pass@1 table (CPT-only base vs SFT model
// per split, from the report.json files `trex or eval` writes), throughput/MFU
// figures and the data summary. See docs/demo.md.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace trex::demo {

struct CurvePoint {
  double x = 0.0;
  double y = 0.0;
};

struct CurveSeries {
  std::string label;
  std::vector<CurvePoint> points;
  bool dashed = false;
};

// Reads a metrics JSONL file ({"step", "loss", "lm_loss", "val_loss", ...} per
// line) into "<prefix> train" (field `loss`, else `lm_loss`) and "<prefix> val"
// (`val_loss`, dashed) series against `step` (else the record's position).
// Missing or non-numeric fields are skipped; series without points are left out.
// A missing file or a line that is not JSON is a trex::Error naming file/line.
std::vector<CurveSeries> read_loss_series(const std::string& metrics_path,
                                          const std::string& prefix);

struct SvgChart {
  std::string title;
  std::string x_label = "step";
  std::string y_label = "loss";
  int width = 760;
  int height = 440;
  // Plot area = the canvas minus these margins (axis labels and ticks live there).
  int margin_left = 72;
  int margin_right = 24;
  int margin_top = 44;
  int margin_bottom = 56;
};

// "Nice" axis bounds and tick step (1, 2 or 5 x 10^k) covering [lo, hi].
struct AxisTicks {
  double lo = 0.0, hi = 1.0, step = 1.0;
};
AxisTicks nice_ticks(double lo, double hi, int target_ticks = 5);

// A standalone SVG document with one polyline per series (non-finite points
// dropped), axes scaled to nice ticks over all series, and a legend.
std::string loss_curves_svg(const std::vector<CurveSeries>& series, const SvgChart& chart);

// Pass@1 of one split in a `trex or eval` report.json: benchmarks[split] when
// present, else the only benchmark, else `micro`.
struct Pass1Cell {
  bool present = false;
  double pass1 = 0.0;  // percent
  int64_t n = 0;
  double execution_rate = -1.0;  // percent; -1 when absent
};
Pass1Cell read_pass1(const std::string& report_json_path, const std::string& split);

// How much of the reference data sections a split's completions reproduce:
// each line between `data;` and `end;` of a gold completion counts as
// reproduced when the completion's own data section holds it (whitespace
// collapsed; each generated line matches once). A finer signal than Pass@1
// while a model is still learning to copy the question's names and numbers
// (one wrong value fails the whole item). Completions are {"id",
// "completion"} or {"id", "completions": [first, ...]}; a gold id without a
// completion counts its lines as missed. Malformed lines are a trex::Error
// naming the file and line.
struct DataLineRecall {
  int64_t items = 0;        // gold items
  int64_t lines = 0;        // gold data-section lines
  int64_t reproduced = 0;   // of those, found in the completion
  int64_t exact_items = 0;  // items whose data section is reproduced line for line
  double percent() const {
    return lines > 0 ? 100.0 * static_cast<double>(reproduced) / static_cast<double>(lines) : 0.0;
  }
};
DataLineRecall data_line_recall(const std::string& completions_path, const std::string& gold_path);

struct DemoReportInputs {
  std::string title = "T-Rex demo";
  std::vector<std::string> splits = {"test", "heldout_template", "heldout_family", "public"};
  std::map<std::string, std::string> base_reports;  // split -> report.json of the CPT-only base
  std::map<std::string, std::string> sft_reports;   // split -> report.json of the SFT model
  // split -> report.json of the model after the GRPO stage; empty: no RL column.
  std::map<std::string, std::string> rl_reports;
  std::vector<std::pair<std::string, std::string>> figures;  // (figure, value): throughput, MFU
  // split -> share of the reference data-section lines reproduced (percent);
  // a split missing from a map shows "-".
  std::map<std::string, double> base_data_lines, sft_data_lines;
  std::vector<std::pair<std::string, std::string>>
      charts;                   // (caption, SVG path relative to report.md)
  nlohmann::json data_summary;  // summary.json of `trex or demo-data`; null: no data section
  std::string notes;            // free Markdown appended at the end
  // The first of the report's two opening sentences (what was trained, on
  // what, how long); the second, the headline gain on `headline_split`, is
  // written from the reports. Empty: no opening sentences.
  std::string what_was_trained;
  std::string headline_split = "test";
};

std::string demo_report_markdown(const DemoReportInputs& inputs);
// Writes report.md atomically.
void write_demo_report(const std::string& path, const DemoReportInputs& inputs);

}  // namespace trex::demo
