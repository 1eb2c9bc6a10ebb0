#include "trex/or/eval/runner.hpp"

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/eval/python_probe.hpp"
#include "trex/or/solver/linear_model.hpp"

namespace trex::orlib::eval {
namespace {

void write_all(int fd, const std::string& data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// Runs in the sandboxed child: translate, solve, report as one JSON object.
void solve_model_in_child(int fd, CodeKind kind, const std::string& code, const std::string& solver,
                          double time_limit) {
  nlohmann::json r;
  try {
    LinearModel model = kind == CodeKind::mathprog ? LinearModel::from_mathprog(code, "model.mod")
                                                   : LinearModel::from_lp(code, "model.lp");
    r["rows"] = model.num_rows();
    r["cols"] = model.num_cols();
    r["integer"] = model.num_integer();
    SolveOptions options;
    options.time_limit_seconds = time_limit;
    SolveResult s = solver == "cbc" ? model.solve_cbc(options) : model.solve_glpk(options);
    r["stage"] = "solve";
    r["status"] = to_string(s.status);
    if (std::isfinite(s.objective)) r["objective"] = s.objective;
    r["message"] = s.message.substr(0, 2000);
    r["output"] = s.output.substr(0, 4000);
    r["seconds"] = s.seconds;
  } catch (const ModelError& e) {
    r["stage"] = "translate";
    r["message"] = std::string(e.what()).substr(0, 4000);
    r["line"] = e.line_number();
  } catch (const std::exception& e) {
    r["stage"] = "error";
    r["message"] = std::string(e.what()).substr(0, 4000);
  }
  write_all(fd, dump_compact(r));
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

std::string first_lines(const std::string& text, int lines, size_t max_bytes = 600) {
  std::string out;
  int n = 0;
  for (const auto& l : split(text, '\n')) {
    if (n++ >= lines) break;
    if (!out.empty()) out += " | ";
    out += trim(l);
  }
  if (out.size() > max_bytes) out = out.substr(0, max_bytes) + "...";
  return out;
}

// Outcome fields every path fills from the sandbox result.
Outcome base_outcome(const SandboxResult& r) {
  Outcome o;
  o.sandbox_end = to_string(r.end);
  o.wall_seconds = r.wall_seconds;
  o.cpu_seconds = r.cpu_seconds;
  o.peak_rss_kb = r.peak_rss_kb;
  o.stdout_excerpt = excerpt(r.out.text());
  o.stderr_excerpt = excerpt(r.err.text());
  return o;
}

// Sandbox ends that decide the category whatever the task printed.
bool limit_outcome(const SandboxResult& r, Outcome& o) {
  switch (r.end) {
    case SandboxEnd::wall_timeout:
      o.category = Category::timeout;
      o.detail = "wall-time limit";
      return true;
    case SandboxEnd::cpu_timeout:
      o.category = Category::timeout;
      o.detail = "CPU-time limit";
      return true;
    case SandboxEnd::memory_limit:
      o.category = Category::runtime_error;
      o.detail = "memory_limit: resident memory above the limit";
      return true;
    case SandboxEnd::output_limit:
      o.category = Category::runtime_error;
      o.detail = "output_limit: more output than allowed";
      return true;
    case SandboxEnd::process_limit:
      o.category = Category::runtime_error;
      o.detail = "process_limit: too many processes";
      return true;
    case SandboxEnd::disk_limit:
      o.category = Category::runtime_error;
      o.detail = "disk_limit: too much written to the sandbox directory";
      return true;
    case SandboxEnd::setup_failed:
      o.category = Category::runtime_missing;
      o.detail = "sandbox: " + r.setup_error;
      return true;
    case SandboxEnd::signaled:
      o.category = Category::runtime_error;
      o.detail = r.signal == SIGXFSZ ? "file_size_limit: " + signal_name(r.signal)
                                     : "killed by " + signal_name(r.signal);
      return true;
    case SandboxEnd::exited:
      return false;
  }
  return false;
}

Outcome interpret_model(SandboxResult&& r, const std::string& solver) {
  Outcome o = base_outcome(r);
  if (limit_outcome(r, o)) {
    if (r.end == SandboxEnd::signaled) o.detail = "solver crashed: " + o.detail;
    return o;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.result);
  } catch (const std::exception&) {
    o.category = Category::runtime_error;
    o.detail = "no solver result (exit code " + std::to_string(r.exit_code) + ")";
    return o;
  }
  std::string stage = j.value("stage", "");
  std::string message = j.value("message", "");
  if (stage == "translate") {
    o.category = Category::syntax_error;
    o.detail = first_lines(message, 4);
    o.stderr_excerpt = excerpt(message);
    return o;
  }
  if (stage != "solve") {
    o.category = Category::runtime_error;
    o.detail = first_lines(message, 3);
    return o;
  }
  std::string status = j.value("status", "error");
  o.objective_source = solver;
  if (auto out = j.find("output");
      out != j.end() && out->is_string() && !out->get<std::string>().empty())
    o.stdout_excerpt = excerpt(out->get<std::string>());
  if (status == "optimal") {
    o.ran = true;
    o.status = Reported::optimal;
    auto obj = j.find("objective");
    o.objective = obj != j.end() && obj->is_number() ? obj->get<double>() : 0.0;
  } else if (status == "infeasible") {
    o.ran = true;
    o.status = Reported::infeasible;
  } else if (status == "unbounded") {
    o.ran = true;
    o.status = Reported::unbounded;
  } else if (status == "time_limit") {
    o.category = Category::timeout;
    o.detail = "solver time limit";
  } else {
    o.category = Category::runtime_error;
    o.detail = first_lines(message, 3);
  }
  return o;
}

Outcome interpret_python(SandboxResult&& r) {
  Outcome o = base_outcome(r);
  nlohmann::json report;
  if (!r.result.empty()) {
    try {
      report = nlohmann::json::parse(r.result);
    } catch (const std::exception&) {
      report = nullptr;
    }
  }
  if (limit_outcome(r, o)) return o;
  const std::string err_text = r.err.text();
  if (r.exit_code != 0) {
    std::string type, message;
    bool compile_phase = false;
    if (report.is_object() && report["exception"].is_object()) {
      type = report["exception"].value("type", "");
      message = report["exception"].value("message", "");
      compile_phase = report.value("phase", "") == "compile";
    } else {
      last_traceback_exception(err_text, type, message);
    }
    if (!type.empty()) {
      o.category = classify_python_exception(type, message, compile_phase, o.detail);
      return o;
    }
    o.category = Category::runtime_error;
    if (report.is_object() && report["exit"].is_string())
      o.detail = "sys.exit(" + report["exit"].get<std::string>() + ")";
    else
      o.detail = "exit code " + std::to_string(r.exit_code);
    return o;
  }
  o.ran = true;
  ProbeChoice choice = probe_choice(report);
  if (choice.found) {
    const std::string& s = choice.status;
    const std::string source = "probe:" + choice.lib + "(" + choice.where + ")";
    if ((s == "optimal" || s == "feasible") && std::isfinite(choice.objective)) {
      o.status = Reported::optimal;
      o.objective = choice.objective;
      o.objective_source = source;
      if (s == "feasible") o.detail = "feasible solution, optimality not proven";
      return o;
    }
    if (s == "infeasible" || s == "unbounded" || s == "infeasible_or_unbounded") {
      o.status = s == "infeasible"  ? Reported::infeasible
                 : s == "unbounded" ? Reported::unbounded
                                    : Reported::infeasible_or_unbounded;
      o.objective_source = source;
      return o;
    }
    if (s == "time_limit") {
      o.ran = false;
      o.category = Category::timeout;
      o.detail = "solver time limit (" + choice.lib + ")";
      return o;
    }
  }
  PrintedResult printed = parse_printed_result(r.out.text());
  o.status = printed.status;
  o.objective = printed.objective;
  o.objective_source = printed.status == Reported::none ? "none" : "stdout:" + printed.how;
  if (printed.status == Reported::none) o.detail = "no objective reported";
  return o;
}

}  // namespace

std::string excerpt(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t start = text.size() - max_bytes;
  for (int k = 0;
       k < 4 && start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80;
       ++k)
    ++start;
  return "..." + text.substr(start);
}

std::vector<std::string> python_environment(const std::string& python_path) {
  std::string dir = std::filesystem::path(python_path).parent_path().string();
  const char* path = std::getenv("PATH");
  std::vector<std::string> env = {
      "PATH=" + dir + ":" + (path && *path ? path : "/usr/local/bin:/usr/bin:/bin"),
      "LANG=C.UTF-8",
      "LC_ALL=C.UTF-8",
      "PYTHONUTF8=1",
      "PYTHONIOENCODING=utf-8:backslashreplace",
      "PYTHONDONTWRITEBYTECODE=1",
      "PYTHONUNBUFFERED=1",
      "PYTHONHASHSEED=0",
      "OMP_NUM_THREADS=1",
      "OPENBLAS_NUM_THREADS=1",
      "MKL_NUM_THREADS=1",
      "NUMEXPR_NUM_THREADS=1",
      "MPLBACKEND=Agg",
  };
  for (const char* name : {"PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH",
                           "GRB_LICENSE_FILE", "GUROBI_HOME", "COPT_HOME", "COPT_LICENSE_DIR",
                           "SCIPOPTDIR", "PYENV_VERSION", "PYENV_ROOT"})
    if (const char* v = std::getenv(name); v && *v) env.push_back(std::string(name) + "=" + v);
  return env;
}

SandboxTask make_task(const Extraction& ex, const RunSettings& settings) {
  SandboxTask task;
  task.limits = settings.limits;
  if (ex.kind == CodeKind::python) {
    task.argv = {settings.python, "-B", "-u", "__trex_run.py"};
    task.env = settings.python_env;
    task.files = {{"solution.py", ex.code}, {"__trex_run.py", python_runner_source()}};
    return task;
  }
  const CodeKind kind = ex.kind;
  const std::string code = ex.code;
  const std::string solver = settings.solver;
  const double time_limit =
      std::max(0.1, 0.9 * std::min(settings.limits.cpu_seconds, settings.limits.wall_seconds));
  task.in_child = [kind, code, solver, time_limit](int fd) {
    solve_model_in_child(fd, kind, code, solver, time_limit);
  };
  return task;
}

Outcome interpret(const Extraction& ex, SandboxResult&& result, const std::string& solver) {
  if (ex.kind == CodeKind::python) return interpret_python(std::move(result));
  return interpret_model(std::move(result), solver);
}

nlohmann::json python_preflight(Sandbox& sandbox, const RunSettings& settings) {
  if (settings.python.empty()) throw Error("no Python interpreter").field("--python");
  SandboxTask task;
  task.limits = settings.limits;
  task.limits.wall_seconds = std::max(20.0, task.limits.wall_seconds);
  task.limits.cpu_seconds = std::max(20.0, task.limits.cpu_seconds);
  task.argv = {settings.python, "-B", "__trex_preflight.py"};
  task.env = settings.python_env;
  task.files = {{"__trex_preflight.py", python_preflight_source()}};
  SandboxResult r = sandbox.run_one(std::move(task));
  if (r.end == SandboxEnd::exited && r.exit_code == 0) {
    std::string out = r.out.text();
    for (const auto& line : split(out, '\n')) {
      std::string t = trim(line);
      if (t.empty() || t[0] != '{') continue;
      try {
        return nlohmann::json::parse(t);
      } catch (const std::exception&) {
      }
    }
  }
  std::string why = r.end == SandboxEnd::setup_failed ? r.setup_error
                    : r.end == SandboxEnd::exited     ? "exit code " + std::to_string(r.exit_code) +
                                                        ": " + first_lines(r.err.text(), 6)
                                                  : std::string(to_string(r.end));
  std::string hint;
  if (sandbox.isolation().uid_per_slot)
    hint = " (the sandbox runs it as unprivileged uids from " +
           std::to_string(sandbox.isolation().sandbox_uid_base) +
           ": the interpreter and its libraries must be readable by other users, e.g. "
           "--python /usr/bin/python3; --sandbox-uid 0 keeps root without a kernel "
           "process limit)";
  throw Error("the Python interpreter cannot run in the sandbox: " + why + hint)
      .file(settings.python)
      .field("--python");
}

}  // namespace trex::orlib::eval
