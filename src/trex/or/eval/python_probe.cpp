#include "trex/or/eval/python_probe.hpp"

#include <cctype>
#include <cmath>
#include <cstring>
#include <vector>

#include "trex/core/strings.hpp"

namespace trex::orlib::eval {

namespace {

const char* const kRunner =
    R"PY(# T-Rex OR evaluation runner (trusted harness code, see docs/or-eval.md).
# Runs solution.py as __main__; at exit reports the solver models it left behind on fd 3.
import atexit, builtins, gc, json, math, os, sys, types

_REPORT_FD = 3
_ROOTS = ("pulp", "gurobipy", "coptpy", "pyscipopt", "highspy", "ortools", "mip", "pyomo",
          "cvxpy")
_registry = []  # (lib, self, returned, args) for every solve call, in call order
_state = {"phase": "start", "exception": None, "exit": None}
_main = types.ModuleType("__main__")


def _finite(v):
    try:
        f = float(v)
    except Exception:
        return None
    return f if math.isfinite(f) else None


def _lib_of(o):
    try:
        mro = type(o).__mro__
    except Exception:
        return None
    for c in mro:
        mod = getattr(c, "__module__", None) or ""
        root = mod.split(".", 1)[0]
        if root not in _ROOTS:
            continue
        n = getattr(c, "__name__", "")
        if root == "pulp" and n == "LpProblem":
            return "pulp"
        if root in ("gurobipy", "coptpy", "pyscipopt", "mip") and n == "Model":
            return root
        if root == "highspy" and n in ("Highs", "_Highs"):
            return "highspy"
        if root == "ortools" and n == "Solver":
            return "ortools"
        if root == "ortools" and n == "CpSolver":
            return "ortools_cp"
        if root == "pyomo" and n in ("ConcreteModel", "AbstractModel"):
            return "pyomo"
        if root == "cvxpy" and n == "Problem":
            return "cvxpy"
    return None


def _call(f, *a):
    try:
        return f(*a)
    except Exception:
        return None


def _status_pulp(o, ret):
    st = getattr(o, "status", None)
    name = {1: "optimal", -1: "infeasible", -2: "unbounded", 0: "not_solved",
            -3: "undefined"}.get(st, "unknown")
    ss = getattr(o, "sol_status", None)
    if name == "optimal" and ss == 2:
        name = "feasible"
    if name in ("undefined", "not_solved", "unknown"):
        # e.g. GLPK_CMD on an infeasible model: status Undefined, sol_status Infeasible
        name = {-1: "infeasible", -2: "unbounded"}.get(ss, name)
    obj = None
    if name in ("optimal", "feasible"):
        e = getattr(o, "objective", None)
        obj = _call(e.value) if e is not None else None
    return name, st, obj


def _status_gurobipy(o, ret):
    st = _call(lambda: o.Status)
    name = {2: "optimal", 3: "infeasible", 4: "infeasible_or_unbounded", 5: "unbounded",
            1: "not_solved", 9: "time_limit", 13: "feasible"}.get(st, "other")
    obj = None
    if name == "time_limit" and (_call(lambda: o.SolCount) or 0) > 0:
        name = "feasible"
    if name in ("optimal", "feasible"):
        obj = _call(lambda: o.ObjVal)
    return name, st, obj


def _status_coptpy(o, ret):
    st = _call(lambda: o.status)
    name = {1: "optimal", 2: "infeasible", 3: "unbounded", 4: "infeasible_or_unbounded",
            0: "not_solved", 8: "time_limit"}.get(st, "other")
    obj = _call(lambda: o.objval) if name == "optimal" else None
    return name, st, obj


def _status_pyscipopt(o, ret):
    st = str(_call(o.getStatus)).lower()
    name = {"optimal": "optimal", "infeasible": "infeasible", "unbounded": "unbounded",
            "inforunbd": "infeasible_or_unbounded", "timelimit": "time_limit",
            "unknown": "not_solved"}.get(st, "other")
    if name == "time_limit" and (_call(o.getNSols) or 0) > 0:
        name = "feasible"
    obj = _call(o.getObjVal) if name in ("optimal", "feasible") else None
    return name, st, obj


def _status_highspy(o, ret):
    ms = _call(o.getModelStatus)
    s = str(_call(o.modelStatusToString, ms) if ms is not None else "").lower()
    if s == "optimal":
        name = "optimal"
    elif "infeasible or unbounded" in s:
        name = "infeasible_or_unbounded"
    elif "infeasible" in s:
        name = "infeasible"
    elif "unbounded" in s:
        name = "unbounded"
    elif "time limit" in s:
        name = "time_limit"
    else:
        name = "not_solved"
    obj = None
    if name == "optimal":
        info = _call(o.getInfo)
        obj = getattr(info, "objective_function_value", None) if info is not None else None
    return name, s, obj


def _status_ortools(o, ret):
    name = {0: "optimal", 1: "feasible", 2: "infeasible", 3: "unbounded", 4: "other",
            5: "other", 6: "not_solved"}.get(ret, "unknown")
    obj = _call(lambda: o.Objective().Value()) if name in ("optimal", "feasible") else None
    return name, ret, obj


def _status_ortools_cp(o, ret):
    s = _call(o.StatusName)
    if s is None and ret is not None:
        s = _call(o.StatusName, ret)
    s = str(s).lower()
    name = {"optimal": "optimal", "feasible": "feasible", "infeasible": "infeasible",
            "model_invalid": "other", "unknown": "not_solved"}.get(s, "unknown")
    obj = _call(o.ObjectiveValue) if name in ("optimal", "feasible") else None
    return name, s, obj


def _status_mip(o, ret):
    st = getattr(o, "status", None)
    s = str(getattr(st, "name", st)).upper()
    name = {"OPTIMAL": "optimal", "FEASIBLE": "feasible", "INFEASIBLE": "infeasible",
            "INT_INFEASIBLE": "infeasible", "UNBOUNDED": "unbounded",
            "NO_SOLUTION_FOUND": "not_solved", "LOADED": "not_solved"}.get(s, "other")
    obj = _call(lambda: o.objective_value) if name in ("optimal", "feasible") else None
    return name, s, obj


def _status_cvxpy(o, ret):
    s = str(getattr(o, "status", None)).lower()
    name = {"optimal": "optimal", "optimal_inaccurate": "feasible", "infeasible": "infeasible",
            "infeasible_inaccurate": "infeasible", "unbounded": "unbounded",
            "unbounded_inaccurate": "unbounded"}.get(s, "not_solved")
    obj = _call(lambda: o.value) if name in ("optimal", "feasible") else None
    return name, s, obj


def _status_pyomo(o, results):
    tc = None
    if results is not None:
        tc = _call(lambda: str(results.solver.termination_condition))
    name = {"optimal": "optimal", "globallyoptimal": "optimal", "locallyoptimal": "optimal",
            "infeasible": "infeasible", "unbounded": "unbounded",
            "infeasibleorunbounded": "infeasible_or_unbounded",
            "maxtimelimit": "time_limit"}.get(str(tc).lower(), "unknown")
    obj = None
    if name == "optimal":
        env = sys.modules.get("pyomo.environ")
        if env is not None:
            try:
                for ob in o.component_data_objects(env.Objective, active=True):
                    obj = env.value(ob, exception=False)
                    break
            except Exception:
                obj = None
    return name, tc, obj


_STATUS = {"pulp": _status_pulp, "gurobipy": _status_gurobipy, "coptpy": _status_coptpy,
           "pyscipopt": _status_pyscipopt, "highspy": _status_highspy,
           "ortools": _status_ortools, "ortools_cp": _status_ortools_cp, "mip": _status_mip,
           "cvxpy": _status_cvxpy, "pyomo": _status_pyomo}

# Solve entry points recorded when their module is imported (pure-Python classes
# only; extension types cannot be patched and are found through globals / gc).
_TARGETS = [("pulp", "LpProblem", "solve", "pulp"), ("mip", "Model", "optimize", "mip"),
            ("cvxpy", "Problem", "solve", "cvxpy"),
            ("ortools.linear_solver.pywraplp", "Solver", "Solve", "ortools"),
            ("ortools.sat.python.cp_model", "CpSolver", "Solve", "ortools_cp"),
            ("pyomo.opt.base.solvers", "OptSolver", "solve", "pyomo"),
            ("highspy", "Highs", "run", "highspy"), ("coptpy", "Model", "solve", "coptpy"),
            ("gurobipy", "Model", "optimize", "gurobipy"),
            ("pyscipopt", "Model", "optimize", "pyscipopt")]
_patched = set()


def _patch(target):
    modname, clsname, meth, lib = target
    try:
        cls = getattr(sys.modules[modname], clsname)
        orig = getattr(cls, meth)
        if getattr(orig, "_trex_recorded", False):
            return True

        def recorded(self, *args, **kwargs):
            ret = orig(self, *args, **kwargs)
            _registry.append((lib, self, ret, args))
            return ret

        recorded._trex_recorded = True
        setattr(cls, meth, recorded)
        return True
    except Exception:
        # The module may still be initialising (its own imports run through
        # the hook); it is tried again on the next import. Extension types
        # that refuse new attributes are given up after the module is done.
        return getattr(sys.modules.get(modname), clsname, None) is not None


_orig_import = builtins.__import__


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    module = _orig_import(name, globals, locals, fromlist, level)
    if len(_patched) < len(_TARGETS):
        for t in _TARGETS:
            if t[0] not in _patched and t[0] in sys.modules and _patch(t):
                _patched.add(t[0])
    return module


def _describe(o, lib, ret, where, name, pyomo_results):
    extra = pyomo_results.get(id(o)) if lib == "pyomo" else ret
    try:
        status, raw, obj = _STATUS[lib](o, extra)
    except Exception as e:
        status, raw, obj = "error", repr(e)[:200], None
    return {"lib": lib, "where": where, "name": name, "status": status,
            "raw_status": str(raw)[:100], "objective": _finite(obj)}


_DEFINITIVE = ("optimal", "feasible", "infeasible", "unbounded", "infeasible_or_unbounded",
               "time_limit")


def _collect():
    pyomo_results, last_ret = {}, {}
    solved = {}  # id -> (order, object, lib)
    for order, (lib, o, ret, args) in enumerate(_registry):
        if lib == "pyomo":
            if not args:
                continue
            o = args[0]
            pyomo_results[id(o)] = ret
            lib = _lib_of(o) or "pyomo"
        last_ret[id(o)] = ret
        solved[id(o)] = (order, o, lib)
    models, seen = [], set()
    for order, o, lib in sorted(solved.values(), key=lambda t: t[0]):
        seen.add(id(o))
        models.append(_describe(o, lib, last_ret.get(id(o)), "solved", "", pyomo_results))
    g = _main.__dict__
    results_objs = []
    for name, v in list(g.items()):
        if type(v).__name__ == "SolverResults":
            results_objs.append(v)
        lib = _lib_of(v)
        if lib is None or id(v) in seen:
            continue
        seen.add(id(v))
        if lib == "pyomo" and id(v) not in pyomo_results and results_objs:
            pyomo_results[id(v)] = results_objs[-1]
        models.append(_describe(v, lib, last_ret.get(id(v)), "globals", name, pyomo_results))
    if not any(m["status"] in _DEFINITIVE for m in models):
        scanned = 0
        for v in gc.get_objects():
            scanned += 1
            if scanned > 3000000:
                break
            mod = getattr(type(v), "__module__", None)
            if not mod or mod.split(".", 1)[0] not in _ROOTS or id(v) in seen:
                continue
            lib = _lib_of(v)
            if lib is None:
                continue
            seen.add(id(v))
            models.append(_describe(v, lib, last_ret.get(id(v)), "gc", "", pyomo_results))
    chosen = -1
    for where in ("solved", "globals", "gc"):
        for i, m in enumerate(models):
            if m["where"] == where and m["status"] in _DEFINITIVE:
                chosen = i
        if chosen >= 0:
            break
    return models, chosen


def _report():
    try:
        builtins.__import__ = _orig_import
        models, chosen = _collect()
        out = {"phase": _state["phase"], "exception": _state["exception"],
               "exit": _state["exit"], "models": models[:20],
               "chosen": chosen if chosen < 20 else -1}
        if 0 <= chosen < 20:
            pass
        elif chosen >= 20:
            out["models"].append(models[chosen])
            out["chosen"] = len(out["models"]) - 1
        data = json.dumps(out, default=str).encode("utf-8", "replace")
        while data:
            n = os.write(_REPORT_FD, data)
            if n <= 0:
                break
            data = data[n:]
    except BaseException:
        pass


def _record(e):
    info = {"type": type(e).__name__, "message": str(e)[:500]}
    if isinstance(e, ImportError):
        info["module"] = getattr(e, "name", None)
    _state["exception"] = info


def _run():
    path = os.path.join(os.getcwd(), "solution.py")
    with open(path, "rb") as f:
        source = f.read()
    _main.__file__ = path
    _main.__builtins__ = builtins
    sys.modules["__main__"] = _main
    sys.argv = [path]
    builtins.__import__ = _import
    atexit.register(_report)
    _state["phase"] = "compile"
    try:
        code = compile(source, path, "exec")
    except BaseException as e:
        _record(e)
        raise
    _state["phase"] = "run"
    try:
        exec(code, _main.__dict__)
    except SystemExit as e:
        _state["exit"] = str(e.code)[:100]
        raise
    except BaseException as e:
        _record(e)
        raise
    _state["phase"] = "done"


_run()
)PY";

const char* const kPreflight = R"PY(import importlib.util, json, sys
mods = {}
for m in ("pulp", "pyomo", "gurobipy", "coptpy", "pyscipopt", "highspy", "ortools", "mip",
          "cvxpy", "scipy", "numpy"):
    try:
        mods[m] = importlib.util.find_spec(m) is not None
    except Exception:
        mods[m] = False
print(json.dumps({"version": sys.version.split()[0], "executable": sys.executable,
                  "modules": mods}))
)PY";

bool is_ident(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// A number starting at `pos` (sign included); returns its end or npos.
size_t number_at(std::string_view s, size_t pos, double& value) {
  size_t i = pos;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  if (i < s.size() && s[i] == '$') ++i;  // "-$1,000"
  size_t digits_start = i;
  bool digits = false;
  while (i < s.size()) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      digits = true;
      ++i;
    } else if (s[i] == ',' && digits && i + 3 < s.size() &&
               std::isdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isdigit(static_cast<unsigned char>(s[i + 2])) &&
               std::isdigit(static_cast<unsigned char>(s[i + 3])) &&
               (i + 4 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i + 4])))) {
      i += 1;
    } else {
      break;
    }
  }
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j > i + 1 || digits) {
      digits = digits || j > i + 1;
      i = j;
    }
  }
  if (!digits) return std::string_view::npos;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '-' || s[j] == '+')) ++j;
    size_t k = j;
    while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
    if (k > j) i = k;
  }
  std::string text;
  if (s[pos] == '-') text += '-';
  for (size_t k = digits_start; k < i; ++k)
    if (s[k] != ',') text += s[k];
  if (!parse_double(text, value)) return std::string_view::npos;
  return i;
}

// First number in [from, line end), not glued to an identifier ("x1", "obj2").
bool first_number(std::string_view s, size_t from, size_t end, double& value) {
  for (size_t i = from; i < end; ++i) {
    char c = s[i];
    bool starts = std::isdigit(static_cast<unsigned char>(c)) ||
                  ((c == '-' || c == '+' || c == '.' || c == '$') && i + 1 < end &&
                   (std::isdigit(static_cast<unsigned char>(s[i + 1])) || s[i + 1] == '$' ||
                    s[i + 1] == '.'));
    if (!starts) continue;
    if (i > 0 && (is_ident(s[i - 1]) || s[i - 1] == '.')) {
      // skip the rest of this identifier/number
      while (i < end && (is_ident(s[i]) || s[i] == '.')) ++i;
      continue;
    }
    double v;
    size_t stop = number_at(s, i, v);
    if (stop == std::string_view::npos || stop > end) continue;
    if (stop < s.size() && is_ident(s[stop]) && s[stop] != 'e' && s[stop] != 'E') {
      i = stop;
      continue;
    }
    value = v;
    return true;
  }
  return false;
}

struct Hit {
  size_t pos = std::string_view::npos;
  double value = 0.0;
  std::string marker;
};

// The last marker occurrence (from `markers`, matched at a word start) with a number.
Hit last_marker_number(std::string_view text, std::string_view lower,
                       const std::vector<std::string>& markers) {
  Hit best;
  for (const auto& m : markers) {
    size_t pos = 0;
    while ((pos = lower.find(m, pos)) != std::string_view::npos) {
      size_t at = pos;
      pos += m.size();
      if (at > 0 && std::isalpha(static_cast<unsigned char>(lower[at - 1]))) continue;
      size_t word_end = pos;
      while (word_end < lower.size() && (is_ident(lower[word_end]))) ++word_end;
      size_t line_end = lower.find('\n', word_end);
      if (line_end == std::string_view::npos) line_end = lower.size();
      size_t sep = std::string_view::npos;
      for (size_t i = word_end; i < line_end; ++i)
        if (lower[i] == ':' || lower[i] == '=') {
          sep = i;
          break;
        }
      double v;
      bool ok = first_number(text, sep != std::string_view::npos ? sep + 1 : word_end, line_end, v);
      if (!ok && sep != std::string_view::npos &&
          std::string_view(trim(lower.substr(sep + 1, line_end - sep - 1))).empty()) {
        // "Objective value:" then the number alone on the next line.
        size_t next = line_end + 1;
        if (next < lower.size()) {
          size_t next_end = lower.find('\n', next);
          if (next_end == std::string_view::npos) next_end = lower.size();
          std::string t = trim(text.substr(next, next_end - next));
          ok = !t.empty() && parse_double(t, v);
        }
      }
      if (ok && (best.pos == std::string_view::npos || at > best.pos)) {
        best.pos = at;
        best.value = v;
        best.marker = m;
      }
    }
  }
  return best;
}

}  // namespace

const std::string& python_runner_source() {
  static const std::string s = kRunner;
  return s;
}

const std::string& python_preflight_source() {
  static const std::string s = kPreflight;
  return s;
}

const std::vector<std::string>& probed_python_modules() {
  static const std::vector<std::string> m = {
      "pulp", "pyomo", "gurobipy", "coptpy", "pyscipopt", "highspy", "ortools", "mip", "cvxpy"};
  return m;
}

PrintedResult parse_printed_result(std::string_view output) {
  PrintedResult r;
  std::string lower = to_lower(output);
  static const std::vector<std::string> primary = {"objective", "optimal", "optimum", "obj"};
  static const std::vector<std::string> secondary = {"total",   "cost",    "profit", "value",
                                                     "minimum", "maximum", "answer", "result",
                                                     "revenue", "min",     "max"};
  Hit hit = last_marker_number(output, lower, primary);
  // Status phrases; the later of a status phrase and a primary hit wins.
  struct Phrase {
    const char* text;
    Reported status;
  };
  static const Phrase phrases[] = {{"infeasible or unbounded", Reported::infeasible_or_unbounded},
                                   {"inf_or_unbd", Reported::infeasible_or_unbounded},
                                   {"no best solution", Reported::infeasible_or_unbounded},
                                   {"no feasible solution", Reported::infeasible},
                                   {"no primal feasible solution", Reported::infeasible},
                                   {"has unbounded solution", Reported::unbounded},
                                   {"no solution", Reported::infeasible_or_unbounded},
                                   {"not feasible", Reported::infeasible},
                                   {"infeasible", Reported::infeasible},
                                   {"unbounded", Reported::unbounded}};
  // The phrase ending last wins; on equal ends the longer one (listed first).
  size_t status_pos = std::string::npos, status_end = 0;
  Reported status = Reported::none;
  std::string status_text;
  for (const auto& p : phrases) {
    size_t pos = lower.rfind(p.text);
    if (pos == std::string::npos) continue;
    size_t end = pos + std::strlen(p.text);
    if (status_pos == std::string::npos || end > status_end) {
      status_pos = pos;
      status_end = end;
      status = p.status;
      status_text = p.text;
    }
  }
  if (status_pos != std::string::npos &&
      (hit.pos == std::string_view::npos || status_pos > hit.pos)) {
    r.status = status;
    r.how = "status:" + status_text;
    return r;
  }
  if (hit.pos != std::string_view::npos) {
    r.status = Reported::optimal;
    r.objective = hit.value;
    r.how = "marker:" + hit.marker;
    return r;
  }
  Hit second = last_marker_number(output, lower, secondary);
  if (second.pos != std::string_view::npos) {
    r.status = Reported::optimal;
    r.objective = second.value;
    r.how = "fallback:secondary-marker";
    return r;
  }
  // A last non-empty line that is a lone number.
  auto lines = split(output, '\n');
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    std::string t = trim(*it);
    if (t.empty()) continue;
    double v;
    if (parse_double(t, v) && std::isfinite(v)) {
      r.status = Reported::optimal;
      r.objective = v;
      r.how = "fallback:last-number";
    }
    break;
  }
  return r;
}

ProbeChoice probe_choice(const nlohmann::json& report) {
  ProbeChoice c;
  if (!report.is_object()) return c;
  auto models = report.find("models");
  auto chosen = report.find("chosen");
  if (models == report.end() || !models->is_array() || chosen == report.end() ||
      !chosen->is_number_integer())
    return c;
  long index = chosen->get<long>();
  if (index < 0 || index >= static_cast<long>(models->size())) return c;
  const auto& m = (*models)[static_cast<size_t>(index)];
  if (!m.is_object()) return c;
  c.found = true;
  c.lib = m.value("lib", "");
  c.status = m.value("status", "");
  c.where = m.value("where", "");
  auto obj = m.find("objective");
  if (obj != m.end() && obj->is_number()) c.objective = obj->get<double>();
  return c;
}

Category classify_python_exception(std::string_view type, std::string_view message,
                                   bool compile_phase, std::string& detail) {
  std::string t(type);
  std::string msg(message.substr(0, 300));
  std::string lower = to_lower(message);
  detail = t + (msg.empty() ? "" : ": " + msg);
  if (compile_phase || t == "SyntaxError" || t == "IndentationError" || t == "TabError")
    return Category::syntax_error;
  if (t == "ModuleNotFoundError" ||
      (t == "ImportError" && lower.find("no module named") != std::string::npos))
    return Category::runtime_missing;
  // Solver binaries / licences that are not available.
  static const char* missing_phrases[] = {"not available",
                                          "cannot execute",
                                          "no executable found",
                                          "executable not found",
                                          "solver not found",
                                          "could not find solver",
                                          "no license",
                                          "license not found",
                                          "license has expired",
                                          "size-limited license",
                                          "model too large for size-limited",
                                          "failed to load license",
                                          "unable to find license",
                                          "not installed"};
  for (const char* p : missing_phrases)
    if (lower.find(p) != std::string::npos &&
        (t.find("Solver") != std::string::npos || t.find("Gurobi") != std::string::npos ||
         t.find("Copt") != std::string::npos || t.find("COPT") != std::string::npos ||
         t.find("ApplicationError") != std::string::npos || t == "RuntimeError" || t == "OSError" ||
         t == "FileNotFoundError" || t == "Exception"))
      return Category::runtime_missing;
  if (t == "MemoryError") detail = "memory_limit: " + detail;
  return Category::runtime_error;
}

bool last_traceback_exception(std::string_view stderr_text, std::string& type,
                              std::string& message) {
  size_t tb = stderr_text.rfind("Traceback (most recent call last)");
  std::string_view tail = tb == std::string_view::npos ? stderr_text : stderr_text.substr(tb);
  auto lines = split(tail, '\n');
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    std::string line = trim(*it);
    if (line.empty()) continue;
    // "pkg.module.ErrorName: message" or a bare "ErrorName"
    size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    bool ident = !name.empty();
    for (char c : name)
      if (!(is_ident(c) || c == '.')) ident = false;
    if (!ident || name.find("Error") == std::string::npos) {
      if (tb == std::string_view::npos) return false;
      if (!ident) return false;
    }
    size_t dot = name.rfind('.');
    type = dot == std::string::npos ? name : name.substr(dot + 1);
    message = colon == std::string::npos ? "" : trim(line.substr(colon + 1));
    return true;
  }
  return false;
}

}  // namespace trex::orlib::eval
