#include "trex/or/solver/linear_model.hpp"

#include <glpk.h>
#include <unistd.h>

#include <cctype>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "trex/core/atomic_file.hpp"
#include "trex/core/process_pool.hpp"
#include "trex/core/strings.hpp"

// CBC headers are not warning-clean; keep them out of -Werror.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wdeprecated-copy"
#include <coin/CbcModel.hpp>
#include <coin/CbcSolver.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>
#pragma GCC diagnostic pop

namespace trex::orlib {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Routes GLPK's terminal output (thread-local in GLPK 5) into a string for the
// lifetime of the object.
class TerminalCapture {
 public:
  TerminalCapture() { glp_term_hook(&TerminalCapture::hook, this); }
  ~TerminalCapture() { glp_term_hook(nullptr, nullptr); }
  TerminalCapture(const TerminalCapture&) = delete;
  TerminalCapture& operator=(const TerminalCapture&) = delete;
  std::string take() { return std::move(text_); }

 private:
  static int hook(void* self, const char* s) {
    auto* capture = static_cast<TerminalCapture*>(self);
    if (capture->text_.size() < (1u << 20)) capture->text_ += s;  // cap runaway output
    return 1;                                                     // suppress printing
  }
  std::string text_;
};

// A temporary file that GLPK's readers can open; removed on destruction.
class TempFile {
 public:
  TempFile(const std::string& contents, const char* suffix) {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir && *dir ? dir : "/tmp") + "/trex-model-XXXXXX" + suffix;
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    int fd = mkstemps(buf.data(), static_cast<int>(std::strlen(suffix)));
    if (fd < 0) throw Error(std::string("cannot create temporary file: ") + std::strerror(errno));
    path_ = buf.data();
    size_t written = 0;
    while (written < contents.size()) {
      ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
      if (n <= 0) {
        ::close(fd);
        std::remove(path_.c_str());
        throw Error("cannot write temporary file").file(path_);
      }
      written += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// First "<name>:<line>:" in GLPK's diagnostics, or 0.
long first_error_line(const std::string& log, const std::string& name) {
  const std::string prefix = name + ":";
  for (size_t pos = log.find(prefix); pos != std::string::npos; pos = log.find(prefix, pos + 1)) {
    size_t digits = pos + prefix.size(), end = digits;
    while (end < log.size() && std::isdigit(static_cast<unsigned char>(log[end]))) ++end;
    if (end > digits && end < log.size() && log[end] == ':')
      return std::stol(log.substr(digits, end - digits));
  }
  return 0;
}

[[noreturn]] void throw_model_error(const std::string& what, std::string log,
                                    const std::string& name) {
  log = trim(log);
  ModelError error(what + (log.empty() ? std::string() : ":\n" + log));
  error.file(name);
  if (long line = first_error_line(log, name); line > 0) error.line(line);
  throw error;
}

}  // namespace

const char* to_string(SolveStatus status) {
  switch (status) {
    case SolveStatus::optimal:
      return "optimal";
    case SolveStatus::infeasible:
      return "infeasible";
    case SolveStatus::unbounded:
      return "unbounded";
    case SolveStatus::time_limit:
      return "time_limit";
    case SolveStatus::error:
      return "error";
  }
  return "error";
}

LinearModel::LinearModel(LinearModel&& other) noexcept {
  *this = std::move(other);
}

LinearModel& LinearModel::operator=(LinearModel&& other) noexcept {
  if (this != &other) {
    if (tran_) glp_mpl_free_wksp(tran_);
    if (prob_) glp_delete_prob(prob_);
    prob_ = std::exchange(other.prob_, nullptr);
    tran_ = std::exchange(other.tran_, nullptr);
    name_ = std::move(other.name_);
    build_log_ = std::move(other.build_log_);
    column_names_ = std::move(other.column_names_);
  }
  return *this;
}

LinearModel::~LinearModel() {
  if (tran_) glp_mpl_free_wksp(tran_);
  if (prob_) glp_delete_prob(prob_);
}

namespace {

// Translates the model (and data) in a forked child and throws a ModelError if
// the translator kills that child; a child that merely reports a MathProg error
// returns, so the in-process translation gives the located message.
void require_translator_survives(const std::string& model_path, const std::string& data_path,
                                 const std::string& name) {
  ProcessPoolOptions options;
  options.process_per_item = true;
  options.limits.core_dumps = false;  // the abort is expected here
  ProcessPool child(options, [&](int, const PoolItem&) -> std::string {
    glp_term_out(GLP_OFF);
    glp_tran* tran = glp_mpl_alloc_wksp();
    int rc = glp_mpl_read_model(tran, model_path.c_str(), data_path.empty() ? 0 : 1);
    if (rc == 0 && !data_path.empty()) rc = glp_mpl_read_data(tran, data_path.c_str());
    if (rc == 0) glp_mpl_generate(tran, nullptr);
    return {};
  });
  PoolResult result;
  try {
    result = child.run_one({});
  } catch (const Error& e) {
    throw ModelError(e.message()).file(name);
  }
  if (result.status == PoolStatus::crashed && result.signal != 0)
    throw ModelError(std::string("MathProg translator (GLPK) crashed on this model (") +
                     strsignal(result.signal) + "); the model is rejected")
        .file(name);
}

}  // namespace

LinearModel LinearModel::from_mathprog(const std::string& text, const std::string& name,
                                       Translator translator) {
  TempFile temp(text, ".mod");
  if (translator == Translator::checked_in_child)
    require_translator_survives(temp.path(), "", name);
  LinearModel model;
  model.name_ = name;
  TerminalCapture capture;
  model.tran_ = glp_mpl_alloc_wksp();
  model.prob_ = glp_create_prob();
  auto fail = [&](const char* what) {
    throw_model_error(what, replace_all(capture.take(), temp.path(), name), name);
  };
  if (glp_mpl_read_model(model.tran_, temp.path().c_str(), 0) != 0) fail("MathProg model error");
  if (glp_mpl_generate(model.tran_, nullptr) != 0) fail("MathProg generation error");
  glp_mpl_build_prob(model.tran_, model.prob_);
  model.build_log_ = replace_all(capture.take(), temp.path(), name);
  model.read_column_names();
  return model;
}

LinearModel LinearModel::from_mathprog_file(const std::string& model_path,
                                            const std::string& data_path, Translator translator) {
  LinearModel model;
  model.name_ = model_path;
  TerminalCapture capture;
  model.tran_ = glp_mpl_alloc_wksp();
  model.prob_ = glp_create_prob();
  auto fail = [&](const char* what) { throw_model_error(what, capture.take(), model_path); };
  if (access(model_path.c_str(), R_OK) != 0)
    throw ModelError("cannot read model file").file(model_path);
  if (translator == Translator::checked_in_child &&
      (data_path.empty() || access(data_path.c_str(), R_OK) == 0))
    require_translator_survives(model_path, data_path, model_path);
  if (glp_mpl_read_model(model.tran_, model_path.c_str(), data_path.empty() ? 0 : 1) != 0)
    fail("MathProg model error");
  if (!data_path.empty()) {
    if (access(data_path.c_str(), R_OK) != 0)
      throw ModelError("cannot read data file").file(data_path);
    if (glp_mpl_read_data(model.tran_, data_path.c_str()) != 0) fail("MathProg data error");
  }
  if (glp_mpl_generate(model.tran_, nullptr) != 0) fail("MathProg generation error");
  glp_mpl_build_prob(model.tran_, model.prob_);
  model.build_log_ = capture.take();
  model.read_column_names();
  return model;
}

LinearModel LinearModel::from_lp(const std::string& text, const std::string& name) {
  TempFile temp(text, ".lp");
  LinearModel model;
  model.name_ = name;
  TerminalCapture capture;
  model.prob_ = glp_create_prob();
  if (glp_read_lp(model.prob_, nullptr, temp.path().c_str()) != 0)
    throw_model_error("CPLEX LP read error", replace_all(capture.take(), temp.path(), name), name);
  model.build_log_ = replace_all(capture.take(), temp.path(), name);
  model.read_column_names();
  return model;
}

LinearModel LinearModel::from_lp_file(const std::string& path) {
  if (access(path.c_str(), R_OK) != 0) throw ModelError("cannot read LP file").file(path);
  LinearModel model;
  model.name_ = path;
  TerminalCapture capture;
  model.prob_ = glp_create_prob();
  if (glp_read_lp(model.prob_, nullptr, path.c_str()) != 0)
    throw_model_error("CPLEX LP read error", capture.take(), path);
  model.build_log_ = capture.take();
  model.read_column_names();
  return model;
}

void LinearModel::read_column_names() {
  int n = glp_get_num_cols(prob_);
  column_names_.resize(static_cast<size_t>(n));
  for (int j = 1; j <= n; ++j) {
    const char* s = glp_get_col_name(prob_, j);
    column_names_[static_cast<size_t>(j - 1)] = s ? s : "C" + std::to_string(j);
  }
}

int LinearModel::num_rows() const {
  return glp_get_num_rows(prob_);
}
int LinearModel::num_cols() const {
  return glp_get_num_cols(prob_);
}
int LinearModel::num_nonzeros() const {
  return glp_get_num_nz(prob_);
}
int LinearModel::num_integer() const {
  return glp_get_num_int(prob_);
}
int LinearModel::num_binary() const {
  return glp_get_num_bin(prob_);
}
bool LinearModel::maximize() const {
  return glp_get_obj_dir(prob_) == GLP_MAX;
}
double LinearModel::objective_constant() const {
  return glp_get_obj_coef(prob_, 0);
}

std::string LinearModel::to_cplex_lp() const {
  TempFile temp("", ".lp");
  TerminalCapture capture;
  if (glp_write_lp(prob_, nullptr, temp.path().c_str()) != 0)
    throw Error("GLPK could not write the LP file: " + capture.take()).file(name_);
  return read_file(temp.path());
}

namespace {

// LP status after glp_simplex returned `rc`.
SolveStatus lp_status(glp_prob* prob, int rc, std::string& message) {
  if (rc == GLP_ETMLIM || rc == GLP_EITLIM) {
    message = "GLPK simplex hit the time limit";
    return SolveStatus::time_limit;
  }
  if (rc != 0) {
    message = "GLPK simplex failed (code " + std::to_string(rc) + ")";
    return SolveStatus::error;
  }
  switch (glp_get_status(prob)) {
    case GLP_OPT:
      return SolveStatus::optimal;
    case GLP_NOFEAS:
      return SolveStatus::infeasible;
    case GLP_UNBND:
      return SolveStatus::unbounded;
    default:
      return glp_get_prim_stat(prob) == GLP_NOFEAS ? SolveStatus::infeasible
                                                   : SolveStatus::unbounded;
  }
}

// Solves the LP (or the LP relaxation) the way glpsol does for LPs: automatic
// scaling, an advanced initial basis, primal simplex without presolve (so that
// infeasibility and unboundedness come back as statuses, not error codes).
SolveStatus solve_lp(glp_prob* prob, int limit_ms, std::string& message) {
  glp_smcp smcp;
  glp_init_smcp(&smcp);
  smcp.msg_lev = GLP_MSG_ERR;
  smcp.tm_lim = limit_ms;
  smcp.presolve = GLP_OFF;
  glp_scale_prob(prob, GLP_SF_AUTO);
  glp_adv_basis(prob, 0);
  return lp_status(prob, glp_simplex(prob, &smcp), message);
}

// GLPK's scaling aborts the whole process (glp_set_rii: invalid scale factor)
// on a constraint coefficient whose square leaves the double range (magnitude
// above about 1e154 or below about 1e-154). Such a model is reported instead:
// the first coefficient outside [kMinCoefficient, kMaxCoefficient], or empty.
constexpr double kMaxCoefficient = 1e150;
constexpr double kMinCoefficient = 1e-150;

std::string coefficient_out_of_range(glp_prob* prob) {
  const int m = glp_get_num_rows(prob);
  std::vector<int> index(static_cast<size_t>(glp_get_num_cols(prob)) + 1);
  std::vector<double> value(index.size());
  for (int i = 1; i <= m; ++i) {
    const int len = glp_get_mat_row(prob, i, index.data(), value.data());
    for (int k = 1; k <= len; ++k) {
      const double a = std::fabs(value[static_cast<size_t>(k)]);
      if (a >= kMinCoefficient && a <= kMaxCoefficient) continue;
      const char* row = glp_get_row_name(prob, i);
      const char* col = glp_get_col_name(prob, index[static_cast<size_t>(k)]);
      return "coefficient " + format_number(value[static_cast<size_t>(k)]) + " of " +
             (col ? std::string(col) : "column " + std::to_string(index[static_cast<size_t>(k)])) +
             " in " + (row ? std::string(row) : "row " + std::to_string(i)) +
             " is outside GLPK's range [1e-150, 1e150]";
    }
  }
  return {};
}

// CLP asserts (abort) on a finite row or column bound or an objective
// coefficient near the double limit (`x1 - x2 >= 1e+308`, `max 1e+308 x1`);
// such a value is reported instead, or empty.
constexpr double kMaxBound = 1e100;
constexpr double kMaxObjective = 1e20;  // CLP's createRim asserts at 3.1e31

std::string bound_out_of_range(glp_prob* prob) {
  auto bad = [](int type, double lb, double ub) {
    const bool has_lb = type == GLP_LO || type == GLP_DB || type == GLP_FX;
    const bool has_ub = type == GLP_UP || type == GLP_DB || type == GLP_FX;
    return (has_lb && !(std::fabs(lb) <= kMaxBound)) || (has_ub && !(std::fabs(ub) <= kMaxBound));
  };
  for (int i = 1; i <= glp_get_num_rows(prob); ++i)
    if (bad(glp_get_row_type(prob, i), glp_get_row_lb(prob, i), glp_get_row_ub(prob, i)))
      return "a bound of row " + std::to_string(i) + " is outside [-1e100, 1e100]";
  for (int j = 1; j <= glp_get_num_cols(prob); ++j)
    if (bad(glp_get_col_type(prob, j), glp_get_col_lb(prob, j), glp_get_col_ub(prob, j)))
      return "a bound of column " + std::to_string(j) + " is outside [-1e100, 1e100]";
  for (int j = 0; j <= glp_get_num_cols(prob); ++j)  // 0: the constant term
    if (!(std::fabs(glp_get_obj_coef(prob, j)) <= kMaxObjective))
      return "objective coefficient " + format_number(glp_get_obj_coef(prob, j)) +
             " is outside [-1e20, 1e20]";
  return {};
}

}  // namespace

SolveResult LinearModel::solve_glpk(const SolveOptions& options) {
  SolveResult result;
  if (std::string bad = coefficient_out_of_range(prob_); !bad.empty()) {
    result.message = "GLPK cannot solve this model: " + bad;
    return result;  // status error
  }
  TerminalCapture capture;
  auto start = Clock::now();
  const int limit_ms = static_cast<int>(std::min(options.time_limit_seconds * 1000.0, 2.0e9));
  const bool mip = is_mip();

  if (!mip) {
    result.status = solve_lp(prob_, limit_ms, result.message);
  } else {
    // As glpsol does for MIPs: branch-and-cut with the MIP presolver, which
    // also solves the LP relaxation.
    glp_iocp iocp;
    glp_init_iocp(&iocp);
    iocp.msg_lev = GLP_MSG_ERR;
    iocp.tm_lim = limit_ms;
    iocp.presolve = GLP_ON;
    int rc = glp_intopt(prob_, &iocp);
    if (rc == GLP_ETMLIM) {
      result.status = SolveStatus::time_limit;
      result.message = "GLPK branch-and-cut hit the time limit";
    } else if (rc == GLP_ENOPFS) {
      result.status = SolveStatus::infeasible;
    } else if (rc == GLP_ENODFS) {
      // The relaxation has no dual feasible solution: unbounded, unless it is
      // also primal infeasible. The simplex without presolve tells which.
      double left_ms = std::max(1.0, limit_ms - seconds_since(start) * 1000.0);
      result.status = solve_lp(prob_, static_cast<int>(left_ms), result.message);
      if (result.status == SolveStatus::optimal) result.status = SolveStatus::unbounded;
    } else if (rc != 0) {
      result.status = SolveStatus::error;
      result.message = "GLPK branch-and-cut failed (code " + std::to_string(rc) + ")";
    } else if (glp_mip_status(prob_) == GLP_OPT) {
      result.status = SolveStatus::optimal;
    } else if (glp_mip_status(prob_) == GLP_NOFEAS) {
      result.status = SolveStatus::infeasible;
    } else {
      result.status = SolveStatus::error;
      result.message = "GLPK branch-and-cut ended without a proven optimum";
    }
  }
  result.seconds = seconds_since(start);
  if (result.status == SolveStatus::optimal) {
    int n = num_cols();
    result.x.resize(static_cast<size_t>(n));
    for (int j = 1; j <= n; ++j)
      result.x[static_cast<size_t>(j - 1)] =
          mip ? glp_mip_col_val(prob_, j) : glp_get_col_prim(prob_, j);
    result.objective = mip ? glp_mip_obj_val(prob_) : glp_get_obj_val(prob_);
    if (tran_ != nullptr) {
      capture.take();  // drop solver chatter; keep only the model's own output
      if (glp_mpl_postsolve(tran_, prob_, mip ? GLP_MIP : GLP_SOL) != 0)
        result.message = "post-solve statements failed: " + trim(capture.take());
      result.output = capture.take();
    }
  } else if (result.message.empty()) {
    std::string log = trim(capture.take());
    result.message =
        std::string("GLPK: ") + to_string(result.status) + (log.empty() ? "" : " (" + log + ")");
  }
  return result;
}

SolveResult LinearModel::solve_cbc(const SolveOptions& options) const {
  SolveResult result;
  std::string bad = coefficient_out_of_range(prob_);
  if (bad.empty()) bad = bound_out_of_range(prob_);
  if (!bad.empty()) {
    result.message = "CBC cannot solve this model: " + bad;
    return result;  // status error
  }
  auto start = Clock::now();
  const int m = num_rows();
  const int n = num_cols();

  CoinPackedMatrix matrix(false, 0, 0);
  matrix.setDimensions(0, n);
  std::vector<double> row_lo(static_cast<size_t>(m)), row_hi(static_cast<size_t>(m));
  std::vector<double> col_lo(static_cast<size_t>(n)), col_hi(static_cast<size_t>(n)),
      cost(static_cast<size_t>(n));
  std::vector<int> index(static_cast<size_t>(n) + 1);
  std::vector<double> value(static_cast<size_t>(n) + 1);
  auto lower = [](int type, double lb) {
    return (type == GLP_FR || type == GLP_UP) ? -COIN_DBL_MAX : lb;
  };
  auto upper = [](int type, double ub) {
    return (type == GLP_FR || type == GLP_LO) ? COIN_DBL_MAX : ub;
  };
  for (int i = 1; i <= m; ++i) {
    int len = glp_get_mat_row(prob_, i, index.data(), value.data());
    for (int k = 1; k <= len; ++k) index[static_cast<size_t>(k)] -= 1;
    matrix.appendRow(len, index.data() + 1, value.data() + 1);
    int type = glp_get_row_type(prob_, i);
    row_lo[static_cast<size_t>(i - 1)] = lower(type, glp_get_row_lb(prob_, i));
    row_hi[static_cast<size_t>(i - 1)] = upper(type, glp_get_row_ub(prob_, i));
  }
  for (int j = 1; j <= n; ++j) {
    int type = glp_get_col_type(prob_, j);
    col_lo[static_cast<size_t>(j - 1)] = lower(type, glp_get_col_lb(prob_, j));
    col_hi[static_cast<size_t>(j - 1)] = upper(type, glp_get_col_ub(prob_, j));
    cost[static_cast<size_t>(j - 1)] = glp_get_obj_coef(prob_, j);
  }
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, col_lo.data(), col_hi.data(), cost.data(), row_lo.data(),
                     row_hi.data());
  for (int j = 1; j <= n; ++j)
    if (glp_get_col_kind(prob_, j) != GLP_CV) solver.setInteger(j - 1);
  solver.setObjSense(maximize() ? -1.0 : 1.0);

  CbcModel model(solver);
  model.messageHandler()->setLogLevel(0);
  CbcSolverUsefulData data;  // per-call solver state: no statics shared between solves
  data.noPrinting_ = true;
  CbcMain0(model, data);
  std::string seconds = format_number(std::max(0.01, options.time_limit_seconds));
  const char* argv[] = {"trex", "-log", "0", "-sec", seconds.c_str(), "-solve", "-quit"};
  CbcMain1(
      7, argv, model, [](CbcModel*, int) { return 0; }, data);

  result.seconds = seconds_since(start);
  if (model.isProvenOptimal()) {
    result.status = SolveStatus::optimal;
  } else if (model.isContinuousUnbounded() || model.secondaryStatus() == 7) {
    result.status = SolveStatus::unbounded;
  } else if (model.isProvenInfeasible() || model.secondaryStatus() == 1) {
    result.status = SolveStatus::infeasible;
  } else if (model.isSecondsLimitReached()) {
    result.status = SolveStatus::time_limit;
    result.message = "CBC hit the time limit";
  } else {
    result.status = SolveStatus::error;
    result.message = "CBC ended with status " + std::to_string(model.status()) + "/" +
                     std::to_string(model.secondaryStatus());
  }
  if (result.status == SolveStatus::optimal) {
    const double* x =
        model.bestSolution() ? model.bestSolution() : model.solver()->getColSolution();
    result.x.assign(x, x + n);
    result.objective = model.getObjValue() + objective_constant();
  } else if (result.message.empty()) {
    result.message = std::string("CBC: ") + to_string(result.status);
  }
  return result;
}

LinearModel::Sensitivity LinearModel::sensitivity() const {
  const bool mip = is_mip();
  const int status = mip ? glp_mip_status(prob_) : glp_get_status(prob_);
  require(status == GLP_OPT, "sensitivity(): the model has no optimal solution from solve_glpk()");
  Sensitivity out;
  out.has_duals = !mip;
  const double inf = std::numeric_limits<double>::infinity();
  for (int i = 1; i <= num_rows(); ++i) {
    RowSensitivity r;
    const char* name = glp_get_row_name(prob_, i);
    r.name = name ? name : "r" + std::to_string(i);
    int type = glp_get_row_type(prob_, i);
    const bool has_lower = type == GLP_LO || type == GLP_DB || type == GLP_FX;
    const bool has_upper = type == GLP_UP || type == GLP_DB || type == GLP_FX;
    r.lower = has_lower ? glp_get_row_lb(prob_, i) : -inf;
    r.upper = has_upper ? glp_get_row_ub(prob_, i) : inf;
    r.activity = mip ? glp_mip_row_val(prob_, i) : glp_get_row_prim(prob_, i);
    r.dual = mip ? 0.0 : glp_get_row_dual(prob_, i);
    auto at = [&](double bound) {
      return std::isfinite(bound) &&
             std::fabs(r.activity - bound) <= 1e-7 * std::max(1.0, std::fabs(bound));
    };
    r.binding = at(r.lower) || at(r.upper);
    out.rows.push_back(std::move(r));
  }
  const bool ranges = !mip && glp_bf_exists(prob_) != 0;
  for (int j = 1; j <= num_cols(); ++j) {
    ColumnSensitivity c;
    c.name = column_names_[static_cast<size_t>(j - 1)];
    c.value = mip ? glp_mip_col_val(prob_, j) : glp_get_col_prim(prob_, j);
    c.objective_coef = glp_get_obj_coef(prob_, j);
    c.reduced_cost = mip ? 0.0 : glp_get_col_dual(prob_, j);
    const int stat = ranges ? glp_get_col_stat(prob_, j) : 0;
    if (stat == GLP_BS) {
      // GLPK ranges objective coefficients of basic columns only.
      double coef1 = 0, coef2 = 0, value1 = 0, value2 = 0;
      int var1 = 0, var2 = 0;
      TerminalCapture quiet;
      glp_analyze_coef(prob_, num_rows() + j, &coef1, &var1, &value1, &coef2, &var2, &value2);
      c.has_range = true;
      c.coef_lower = coef1 == -DBL_MAX ? -inf : coef1;
      c.coef_upper = coef2 == +DBL_MAX ? inf : coef2;
    } else if (stat == GLP_NL || stat == GLP_NU) {
      // A non-basic column stays at its bound until its reduced cost changes sign.
      const bool grows = (stat == GLP_NL) != maximize();  // the cost may grow without limit
      const double edge = c.objective_coef - c.reduced_cost;
      c.has_range = true;
      c.coef_lower = grows ? edge : -inf;
      c.coef_upper = grows ? inf : edge;
    }
    out.columns.push_back(std::move(c));
  }
  return out;
}

}  // namespace trex::orlib
