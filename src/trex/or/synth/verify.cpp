#include "trex/or/synth/verify.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/solver/linear_model.hpp"

namespace trex::orlib {

bool objectives_agree(double a, double b) {
  return std::fabs(a - b) <= 1e-6 * std::max(1.0, std::fabs(a));
}

std::string normalize_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool space = false;
  for (unsigned char c : text) {
    if (std::isspace(c)) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += static_cast<char>(std::tolower(c));
  }
  return out;
}

std::string record_id(const Family& family, uint64_t seed, int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06lld", static_cast<long long>(index));
  return std::string(family.name()) + "-s" + std::to_string(seed) + "-" + buf;
}

namespace {

VerifyOutcome reject(std::string reason, std::string detail, double glpk_s = 0, double cbc_s = 0) {
  VerifyOutcome o;
  o.reject_reason = std::move(reason);
  o.detail = std::move(detail);
  o.glpk_seconds = glpk_s;
  o.cbc_seconds = cbc_s;
  return o;
}

// The value printed by the model's "Optimal objective: <z>" line, or NaN.
double printed_objective(const std::string& output) {
  const std::string marker = "Optimal objective:";
  size_t pos = output.find(marker);
  if (pos == std::string::npos) return std::nan("");
  const char* begin = output.c_str() + pos + marker.size();
  char* end = nullptr;
  double value = std::strtod(begin, &end);
  return end == begin ? std::nan("") : value;
}

nlohmann::ordered_json solver_json(const SolveResult& r, bool timings) {
  nlohmann::ordered_json j;
  j["status"] = to_string(r.status);
  j["objective"] = std::isfinite(r.objective) ? nlohmann::ordered_json(r.objective) : nullptr;
  j["seconds"] = timings ? nlohmann::ordered_json(std::round(r.seconds * 1e6) / 1e6) : nullptr;
  return j;
}

bool all_zero(const std::vector<double>& x) {
  for (double v : x)
    if (std::fabs(v) > 1e-9) return false;
  return true;
}

}  // namespace

VerifyOutcome build_and_verify(const Family& family, int64_t index, int attempt,
                               const SynthSettings& settings) {
  Rng rng(settings.seed, {hash_string(family.name()), static_cast<uint64_t>(index),
                          static_cast<uint64_t>(attempt)});
  GenOptions options;
  options.difficulty = settings.mixed_difficulty ? static_cast<Difficulty>(rng.uniform_int(0, 2))
                                                 : settings.difficulty;
  options.side_constraint_rate = settings.side_constraint_rate;

  std::unique_ptr<Instance> instance;
  std::string nl, alg, gmpl;
  try {
    instance = family.generate(rng, options);
    nl = instance->nl();
    alg = instance->alg();
    gmpl = instance->gmpl();
  } catch (const std::exception& e) {
    return reject("generator_error", e.what());
  }
  const std::string id = record_id(family, settings.seed, index);

  std::optional<LinearModel> model;
  try {
    model.emplace(LinearModel::from_mathprog(gmpl, id + ".mod"));
  } catch (const std::exception& e) {
    return reject("translate_error", e.what());
  }
  SolveOptions solve_options;
  solve_options.time_limit_seconds = settings.time_limit_seconds;
  SolveResult glpk = model->solve_glpk(solve_options);
  SolveResult cbc = model->solve_cbc(solve_options);
  const double gs = glpk.seconds, cs = cbc.seconds;

  if (glpk.status != SolveStatus::optimal)
    return reject(std::string("glpk_") + to_string(glpk.status), glpk.message, gs, cs);
  if (cbc.status != SolveStatus::optimal)
    return reject(std::string("cbc_") + to_string(cbc.status), cbc.message, gs, cs);
  if (!objectives_agree(glpk.objective, cbc.objective))
    return reject(
        "solvers_disagree",
        "GLPK " + format_number(glpk.objective) + " vs CBC " + format_number(cbc.objective), gs,
        cs);
  const double printed = printed_objective(glpk.output);
  if (!std::isfinite(printed) ||
      std::fabs(printed - glpk.objective) > 1e-6 * std::max(1.0, std::fabs(glpk.objective)))
    return reject("printed_objective", "model printed '" + trim(glpk.output) + "'", gs, cs);

  const auto& names = model->column_names();
  CheckResult check_glpk = instance->check(Solution::from_columns(glpk.objective, names, glpk.x));
  CheckResult check_cbc = instance->check(Solution::from_columns(cbc.objective, names, cbc.x));
  if (!check_glpk.feasible)
    return reject("checker_glpk", join(check_glpk.violations, "; "), gs, cs);
  if (!check_cbc.feasible) return reject("checker_cbc", join(check_cbc.violations, "; "), gs, cs);
  if (!objectives_agree(glpk.objective, check_glpk.objective))
    return reject("objective_mismatch",
                  "solver " + format_number(glpk.objective) + " vs checker " +
                      format_number(check_glpk.objective),
                  gs, cs);
  if (all_zero(glpk.x)) return reject("trivial", "all-zero optimal solution", gs, cs);

  nlohmann::ordered_json x_ref = nlohmann::ordered_json::object();
  for (size_t j = 0; j < names.size(); ++j)
    if (std::fabs(glpk.x[j]) > 1e-9) x_ref[names[j]] = glpk.x[j];

  nlohmann::ordered_json size = nlohmann::ordered_json::parse(instance->size().dump());
  size["rows"] = model->num_rows();
  size["columns"] = model->num_cols();
  size["integer_columns"] = model->num_integer();
  size["binary_columns"] = model->num_binary();
  size["nonzeros"] = model->num_nonzeros();

  nlohmann::ordered_json record;
  record["id"] = id;
  record["family"] = family.name();
  // The class of this instance's model (a family may be LP in one story and IP in another).
  record["problem_class"] = model->num_integer() == 0                   ? "LP"
                            : model->num_integer() == model->num_cols() ? "IP"
                                                                        : "MILP";
  record["difficulty"] = to_string(options.difficulty);
  record["size"] = size;
  record["variants"] = instance->variants();
  record["nl_template"] = instance->nl_template();
  // Hex text: a 64-bit integer does not survive JSON readers that use doubles.
  record["surface_form"] = hex64(instance->surface_form());
  record["nl"] = nl;
  record["alg"] = alg;
  record["gmpl"] = gmpl;
  record["lp"] = model->to_cplex_lp();
  record["status"] = "optimal";
  record["objective"] = glpk.objective;
  record["solvers"] = {{"glpk", solver_json(glpk, settings.record_timings)},
                       {"cbc", solver_json(cbc, settings.record_timings)}};
  record["x_ref"] = x_ref;
  record["checks"] = {{"glpk_cbc_agree", true},       {"checker_glpk", true},
                      {"checker_cbc", true},          {"checker_objective", check_glpk.objective},
                      {"printed_objective", printed}, {"nontrivial", true}};
  record["seed"] = settings.seed;
  record["index"] = index;
  record["attempt"] = attempt;
  record["generator_version"] = kGeneratorVersion;

  VerifyOutcome ok;
  ok.accepted = true;
  ok.record = record.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  ok.nl_hash = hash_string(normalize_text(nl));
  ok.glpk_seconds = gs;
  ok.cbc_seconds = cs;
  return ok;
}

}  // namespace trex::orlib
