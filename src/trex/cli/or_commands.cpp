// `trex or ...`: the OR data and solver tools.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "trex/cli/commands.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"
#include "trex/or/synth/synth.hpp"

namespace trex::cli {
namespace {

std::pair<int, int> parse_shard(const std::string& text) {
  auto parts = split(text, '/');
  try {
    if (parts.size() == 2) {
      int i = std::stoi(parts[0]), k = std::stoi(parts[1]);
      if (k >= 1 && i >= 0 && i < k) return {i, k};
    }
  } catch (const std::exception&) {
  }
  throw Error("expected i/k with 0 <= i < k, got '" + text + "'").field("--shard");
}

std::string summary_path(const std::string& out) {
  std::filesystem::path p(out);
  std::string stem = p.stem().string();
  return (p.parent_path() / (stem + ".summary.json")).string();
}

int run_solve(const std::string& path, const std::string& data, double time_limit) {
  using namespace trex::orlib;
  const bool lp = path.size() > 3 && to_lower(path.substr(path.size() - 3)) == ".lp";
  LinearModel model =
      lp ? LinearModel::from_lp_file(path)
         : LinearModel::from_mathprog_file(path, data, LinearModel::Translator::checked_in_child);
  std::cout << "model: " << path << " (" << (lp ? "CPLEX LP" : "GNU MathProg") << ")\n"
            << "  rows " << model.num_rows() << ", columns " << model.num_cols() << " ("
            << model.num_integer() << " integer, " << model.num_binary() << " binary), nonzeros "
            << model.num_nonzeros() << ", " << (model.maximize() ? "maximize" : "minimize") << "\n";
  SolveOptions options;
  options.time_limit_seconds = time_limit;
  SolveResult glpk = model.solve_glpk(options);
  SolveResult cbc = model.solve_cbc(options);
  auto show = [](const char* name, const SolveResult& r) {
    std::cout << "  " << name << ": " << to_string(r.status);
    if (r.status == SolveStatus::optimal) std::cout << ", objective " << format_number(r.objective);
    std::cout << " (" << format_fixed(r.seconds * 1e3, 1) << " ms)";
    if (r.status != SolveStatus::optimal && !r.message.empty()) std::cout << " — " << r.message;
    std::cout << "\n";
  };
  show("GLPK", glpk);
  show("CBC ", cbc);
  if (!glpk.output.empty()) std::cout << "model output:\n" << glpk.output;
  bool agree = glpk.status == cbc.status && (glpk.status != SolveStatus::optimal ||
                                             objectives_agree(glpk.objective, cbc.objective));
  std::cout << "solvers " << (agree ? "agree" : "DISAGREE") << "\n";
  return agree ? 0 : 3;
}

}  // namespace

int run_synth_command(const SynthCliOptions& o) {
  using namespace trex::orlib;
  if (o.out.empty()) throw Error("an output file is required").field("--out");
  if (o.n < 0) throw Error("must be non-negative").field("--n");
  SynthRequest request;
  request.count = o.n;
  request.families = parse_family_list(o.families);
  request.settings.seed = o.seed;
  request.settings.mixed_difficulty = o.difficulty == "mix";
  if (!request.settings.mixed_difficulty)
    request.settings.difficulty = parse_difficulty(o.difficulty);
  request.settings.time_limit_seconds = o.time_limit;
  request.settings.record_timings = !o.reproducible;
  std::tie(request.shard_index, request.shard_count) = parse_shard(o.shard);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  request.jobs = o.jobs >= 0 ? o.jobs : static_cast<int>(std::max(1L, cores));
  request.show_progress = !o.quiet;

  JsonlWriter writer(o.out);
  SynthSummary summary = run_synth(request, [&](const std::string& r) { writer.write_line(r); });
  writer.commit();
  json sj = summary_json(summary);
  sj["seed"] = o.seed;
  sj["n"] = o.n;
  sj["shard"] = o.shard;
  sj["difficulty"] = o.difficulty;
  sj["out"] = o.out;
  write_file_atomic(summary_path(o.out), sj.dump(2) + "\n");
  if (!o.quiet) {
    std::cout << format_summary(summary);
    std::cout << "wrote " << summary.written << " records to " << o.out
              << " (summary: " << summary_path(o.out) << ")\n";
  }
  return 0;
}

void add_or_commands(CLI::App& app) {
  auto* orc = app.add_subcommand("or", "Operations-research data, solvers and evaluation");
  orc->require_subcommand(1);
  add_or_eval_commands(*orc);
  add_or_data_commands(*orc);

  auto synth = std::make_shared<SynthCliOptions>();
  auto* s = orc->add_subcommand("synth", "Generate solver-verified OR problem instances (JSONL)");
  s->add_option("--n", synth->n, "Number of records in the whole (unsharded) run")
      ->capture_default_str();
  s->add_option("--families", synth->families,
                "'all' or a comma-separated list (see `trex or families`)")
      ->capture_default_str();
  s->add_option("--seed", synth->seed, "Random seed")->capture_default_str();
  s->add_option("--out", synth->out, "Output JSONL file (written atomically)")->required();
  s->add_option("--shard", synth->shard,
                "Write shard i of k (0-based): i/k; shards concatenate to the full run")
      ->capture_default_str();
  s->add_option("--difficulty", synth->difficulty, "easy|medium|hard|mix")
      ->check(CLI::IsMember({"easy", "medium", "hard", "mix"}))
      ->capture_default_str();
  s->add_option("--jobs", synth->jobs, "Worker processes (default: one per core; 0 = in-process)");
  s->add_option("--time-limit", synth->time_limit, "Per-solve time limit in seconds")
      ->capture_default_str();
  s->add_flag("--reproducible", synth->reproducible,
              "Write null solve times so the same seed gives a byte-identical file (times stay in "
              "the summary)");
  s->add_flag("--quiet", synth->quiet, "No progress bar or summary table");
  s->callback([synth] { run_synth_command(*synth); });

  auto* fam = orc->add_subcommand("families", "List the problem families");
  fam->callback([] {
    for (const auto* f : trex::orlib::all_families())
      std::cout << f->name() << "\t" << to_string(f->problem_class()) << "\t" << f->nl_templates()
                << " templates\t" << f->title() << "\n";
  });

  auto solve_file = std::make_shared<std::string>();
  auto solve_data = std::make_shared<std::string>();
  auto solve_limit = std::make_shared<double>(60.0);
  auto* sv = orc->add_subcommand(
      "solve", "Solve a GNU MathProg (.mod) or CPLEX LP (.lp) model with GLPK and CBC");
  sv->add_option("model", *solve_file, "FILE.mod or FILE.lp")->required()->check(CLI::ExistingFile);
  sv->add_option("--data", *solve_data, "Separate MathProg data file")->check(CLI::ExistingFile);
  sv->add_option("--time-limit", *solve_limit, "Per-solver time limit in seconds")
      ->capture_default_str();
  sv->callback([=] {
    int rc = run_solve(*solve_file, *solve_data, *solve_limit);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace trex::cli
