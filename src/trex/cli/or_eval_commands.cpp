// `trex or prompts`, `trex or eval` (+ --self-test), `trex or eval-hostile`,
// `trex or eval-goldfree`, `trex or eval-throughput`: the OR evaluation harness;
// `trex or bench-types`: the problem types the benchmarks ask for.
#include <cstdio>
#include <iostream>
#include <memory>

#include "trex/cli/commands.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/eval/bench_types.hpp"
#include "trex/or/eval/corpora.hpp"
#include "trex/or/eval/eval.hpp"
#include "trex/or/eval/prompts.hpp"
#include "trex/or/eval/selftest.hpp"

namespace trex::cli {
namespace {

using namespace trex::orlib::eval;

struct EvalCli {
  std::vector<std::string> bench;
  std::string completions;
  std::string out;
  std::string rule = "rel1e-6";
  int k = 1;
  int jobs = 0;
  double timeout = 60.0;
  std::string python = "python3";
  std::string format = "auto";
  std::string solver = "glpk";
  uint64_t memory_mb = 4096;
  int max_procs = 64;
  unsigned sandbox_uid = 61000;
  std::string sentinel = "no-solution";
  bool self_test = false;
  bool quiet = false;
  bool strict = false;
  bool timeout_given = false;
};

void print_scores(const nlohmann::json& report) {
  const int k = report.value("k", 1);
  const std::string kkey = "pass@" + std::to_string(k);
  char line[512];
  std::snprintf(line, sizeof line, "%-36s %6s %8s %8s %8s %8s\n", "benchmark", "n", "pass@1",
                k > 1 ? kkey.c_str() : "", "exec%", "excl");
  std::cout << line;
  for (auto it = report["benchmarks"].begin(); it != report["benchmarks"].end(); ++it) {
    const auto& b = it.value();
    std::string pk = k > 1 ? format_fixed(b.value(kkey, 0.0), 2) : "";
    std::snprintf(line, sizeof line, "%-36s %6lld %8.2f %8s %8.2f %8lld\n", it.key().c_str(),
                  static_cast<long long>(b["n"].get<int64_t>()), b["pass@1"].get<double>(),
                  pk.c_str(), b["execution_rate"].get<double>(),
                  static_cast<long long>(b["excluded_unknown"].get<int64_t>()));
    std::cout << line;
  }
  std::snprintf(line, sizeof line, "%-36s %6s %8.2f\n%-36s %6lld %8.2f\n", "macro", "",
                report["macro"]["pass@1"].get<double>(), "micro",
                static_cast<long long>(report["micro"]["n"].get<int64_t>()),
                report["micro"]["pass@1"].get<double>());
  std::cout << line;
  std::cout << "errors:";
  for (auto it = report["errors"].begin(); it != report["errors"].end(); ++it)
    if (it.value().get<int64_t>() > 0)
      std::cout << " " << it.key() << "=" << it.value().get<int64_t>();
  std::cout << "\n";
}

void run_eval_cli(const EvalCli& c) {
  if (c.self_test) {
    SelfTestOptions s;
    s.bench_paths = c.bench;
    s.python = c.python;
    s.jobs = c.jobs;
    s.timeout = c.timeout_given ? c.timeout : 5.0;  // the built-in loop waits for it
    s.sandbox_uid = c.sandbox_uid;
    s.out_dir = c.out;
    s.progress = false;
    SelfTestResult r = run_self_test(s);
    std::cout << r.table;
    if (r.failures > 0) throw CLI::RuntimeError(1);
    return;
  }
  if (c.bench.empty()) throw Error("at least one benchmark file is required").field("--bench");
  if (c.completions.empty()) throw Error("a completions file is required").field("--completions");
  if (c.out.empty()) throw Error("an output directory is required").field("--out");
  EvalOptions o;
  o.bench_paths = c.bench;
  o.completions_path = c.completions;
  o.out_dir = c.out;
  o.rule = parse_rule(c.rule);
  o.k = c.k;
  o.jobs = c.jobs;
  o.timeout = c.timeout;
  o.python = c.python;
  o.format = parse_code_kind(c.format);
  o.solver = c.solver;
  o.memory_mb = c.memory_mb;
  o.max_processes = c.max_procs;
  o.sandbox_uid = c.sandbox_uid;
  o.sentinel_as_unknown = c.sentinel == "unknown";
  o.progress = !c.quiet;
  o.strict = c.strict;
  nlohmann::json report = run_eval(o);
  const int64_t skipped = report.value("skipped_lines", int64_t{0});
  if (!c.quiet) {
    print_scores(report);
    const auto& in = report["input"];
    std::cout << "input: " << skipped << " lines skipped, "
              << in.value("repaired_records", int64_t{0})
              << " records repaired (lone surrogates / invalid UTF-8 replaced by U+FFFD)\n";
    std::cout << "wrote " << c.out << "/report.md, report.json, items.jsonl ("
              << report["samples"].get<int64_t>() << " samples, "
              << format_fixed(report["timing"]["seconds"].get<double>(), 1) << " s)\n";
  }
  // Completed, but some records were not graded: a distinct status.
  if (skipped > 0) throw CLI::RuntimeError(kExitRecordsSkipped);
}

}  // namespace

void add_or_eval_commands(CLI::App& orc) {
  // ---- prompts
  auto bench_p = std::make_shared<std::vector<std::string>>();
  auto format_p = std::make_shared<std::string>();
  auto out_p = std::make_shared<std::string>();
  auto* p = orc.add_subcommand("prompts", "Write zero-shot prompts for benchmark files (JSONL)");
  p->add_option("--bench", *bench_p, "Benchmark JSONL file(s), comma-separated or repeated")
      ->required()
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  p->add_option("--format", *format_p, "mathprog|lp|python")
      ->required()
      ->check(CLI::IsMember({"mathprog", "lp", "python"}));
  p->add_option("--out", *out_p, "Output prompts JSONL (written atomically)")->required();
  p->callback([=] {
    int64_t n = write_prompts(*bench_p, parse_code_kind(*format_p), *out_p);
    std::cout << "wrote " << n << " prompts to " << *out_p << "\n";
  });

  // ---- eval
  auto c = std::make_shared<EvalCli>();
  auto* e = orc.add_subcommand(
      "eval", "Grade completions on OR benchmarks (Pass@1/Pass@k, error taxonomy)");
  e->add_option("--bench", c->bench, "Benchmark JSONL file(s), comma-separated or repeated")
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  e->add_option("--completions", c->completions,
                "Completions JSONL: {\"id\", \"completion\"} or {\"id\", \"completions\": [...]}")
      ->check(CLI::ExistingFile);
  e->add_option("--out", c->out, "Output directory (report.md, report.json, items.jsonl)");
  e->add_option("--rule", c->rule, "rel1e-6|rel1e-4|abs1e-2|orlm|mamo")
      ->check(CLI::IsMember({"rel1e-6", "rel1e-4", "abs1e-2", "orlm", "mamo"}))
      ->capture_default_str();
  e->add_option("--k", c->k, "Also report the unbiased pass@k")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  e->add_option("--jobs", c->jobs, "Parallel sandboxes (default: one per core)");
  auto* timeout_opt =
      e->add_option("--timeout", c->timeout, "Wall and CPU seconds per completion (self-test: 5)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  e->add_option("--python", c->python, "Python interpreter for Python completions")
      ->capture_default_str();
  e->add_option("--format", c->format, "Extraction hint: auto|mathprog|lp|python")
      ->check(CLI::IsMember({"auto", "mathprog", "lp", "python"}))
      ->capture_default_str();
  e->add_option("--solver", c->solver, "Solver for MathProg/LP completions: glpk|cbc")
      ->check(CLI::IsMember({"glpk", "cbc"}))
      ->capture_default_str();
  e->add_option("--memory-mb", c->memory_mb, "Memory limit per completion (MiB)")
      ->capture_default_str();
  e->add_option("--max-procs", c->max_procs, "Process/thread limit per completion")
      ->capture_default_str();
  e->add_option("--sandbox-uid", c->sandbox_uid,
                "When run as root: first uid of the per-slot sandbox uids (0 keeps root)")
      ->capture_default_str();
  e->add_option(
       "--sentinel", c->sentinel,
       "Ground truths given as -99999/-9999 sentinels: no-solution (as ORLM/SIRL) or unknown")
      ->check(CLI::IsMember({"no-solution", "unknown"}))
      ->capture_default_str();
  e->add_flag("--self-test", c->self_test,
              "Grade the --bench ground truths against themselves through every rule and run the "
              "built-in known-good/known-bad completions");
  e->add_flag("--quiet", c->quiet, "No progress bar or score table");
  e->add_flag("--strict", c->strict,
              "Stop at the first bad line of a benchmark or completions file (default: skip "
              "and count it, and exit 3 when any was skipped)");
  e->callback([c, timeout_opt] {
    c->timeout_given = timeout_opt->count() > 0;
    run_eval_cli(*c);
  });

  // ---- eval-hostile
  auto h = std::make_shared<HostileOptions>();
  auto h_quiet = std::make_shared<bool>(false);
  auto* hs = orc.add_subcommand(
      "eval-hostile", "Generate and evaluate a hostile-completion corpus (harness robustness)");
  hs->add_option("--n", h->n, "Number of cases")->capture_default_str();
  hs->add_option("--out", h->out_dir, "Output directory")->required();
  hs->add_option("--jobs", h->jobs, "Parallel sandboxes (default: one per core)");
  hs->add_option("--timeout", h->timeout, "Seconds per completion")->capture_default_str();
  hs->add_option("--memory-mb", h->memory_mb, "Memory limit per completion (MiB)")
      ->capture_default_str();
  hs->add_option("--max-procs", h->max_processes, "Process/thread limit per completion")
      ->capture_default_str();
  hs->add_option("--python", h->python, "Python interpreter")->capture_default_str();
  hs->add_option("--seed", h->seed, "Random seed")->capture_default_str();
  hs->add_option("--sandbox-uid", h->sandbox_uid,
                 "When run as root: first sandbox uid (0 keeps root)")
      ->capture_default_str();
  hs->add_flag("--quiet", *h_quiet, "No progress bar");
  hs->callback([h, h_quiet] {
    HostileOptions o = *h;
    o.progress = !*h_quiet;
    nlohmann::json s = run_hostile(o);
    std::cout << "hostile corpus: " << s["cases"] << " cases (" << s["kinds"] << " kinds), "
              << s["classified"] << " classified, " << s["unexpected"] << " unexpected verdicts, "
              << s["escaped_writes"] << " escaped writes\n"
              << "verdicts: " << s["verdicts"].dump() << "\n"
              << "harness peak RSS " << s["harness_peak_rss_kb"] << " KiB, wall "
              << format_fixed(s["wall_seconds"].get<double>(), 1) << " s\n"
              << "isolation: " << s["isolation"]["summary"].get<std::string>() << "\n"
              << "summary: " << o.out_dir << "/hostile_summary.json\n";
    for (const auto& u : s["unexpected_examples"])
      std::cout << "  unexpected: " << u.dump() << "\n";
    if (s["classified"] != s["cases"]) throw CLI::RuntimeError(3);
  });

  // ---- eval-goldfree
  auto g_bench = std::make_shared<std::vector<std::string>>();
  auto g_out = std::make_shared<std::string>();
  auto g_python = std::make_shared<bool>(false);
  auto* g = orc.add_subcommand(
      "eval-goldfree",
      "Write gold-free completions (empty, prose, wrong models) for benchmark files");
  g->add_option("--bench", *g_bench, "Benchmark JSONL file(s), comma-separated or repeated")
      ->required()
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  g->add_option("--out", *g_out, "Output completions JSONL")->required();
  g->add_flag("--with-python", *g_python, "Also cycle in Python completions");
  g->callback([=] {
    int64_t n = write_gold_free_completions(*g_bench, *g_out, *g_python);
    std::cout << "wrote " << n << " gold-free completions to " << *g_out << "\n";
  });

  // ---- eval-throughput
  auto t = std::make_shared<ThroughputOptions>();
  auto* tp = orc.add_subcommand(
      "eval-throughput",
      "Measure completions per second for benchmark-sized MathProg, LP and Python");
  tp->add_option("--n", t->n, "MathProg and LP completions each")->capture_default_str();
  tp->add_option("--n-python", t->n_python, "Python completions")->capture_default_str();
  tp->add_option("--jobs", t->jobs, "Parallel sandboxes")->capture_default_str();
  tp->add_option("--python", t->python, "Python interpreter")->capture_default_str();
  tp->add_option("--seed", t->seed, "Random seed")->capture_default_str();
  tp->add_option("--sandbox-uid", t->sandbox_uid,
                 "When run as root: first sandbox uid (0 keeps root)")
      ->capture_default_str();
  tp->add_option("--out", t->out_dir, "Keep the generated corpora and reports here");
  tp->callback([t] {
    nlohmann::json r = run_throughput(*t);
    for (const char* k : {"mathprog", "lp", "python"}) {
      if (!r.contains(k)) continue;
      const auto& v = r[k];
      std::cout << k << ": " << v["completions"] << " completions in "
                << format_fixed(v["seconds"].get<double>(), 2)
                << " s = " << format_fixed(v["per_second"].get<double>(), 1) << "/s with "
                << v["jobs"] << " jobs, pass@1 " << format_fixed(v["pass@1"].get<double>(), 2)
                << "%";
      if (v.contains("library")) std::cout << " (" << v["library"].get<std::string>() << ")";
      std::cout << "\n";
    }
    std::cout << "harness peak RSS " << r["harness_peak_rss_kb"] << " KiB\n";
  });

  // ---- bench-types
  auto bt = std::make_shared<BenchTypesOptions>();
  auto bt_json = std::make_shared<std::string>();
  auto* btc = orc.add_subcommand(
      "bench-types",
      "Classify a sample of benchmark questions by problem type and show which families cover "
      "each type");
  btc->add_option("--bench-dir", bt->bench_dir, "Directory of the benchmark JSONL files")
      ->capture_default_str();
  btc->add_option("--files", bt->files, "File stems under --bench-dir, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  btc->add_option("--sample", bt->sample, "Items drawn from all files together (0: every item)")
      ->capture_default_str();
  btc->add_option("--seed", bt->seed, "Random seed of the sample")->capture_default_str();
  btc->add_option("--json", *bt_json, "Also write the report as JSON to this file");
  btc->callback([=] {
    nlohmann::json r = bench_types_report(*bt);
    std::cout << format_bench_types(r);
    if (!bt_json->empty()) write_file_atomic(*bt_json, r.dump(2) + "\n");
  });
}

}  // namespace trex::cli
