// Linear portfolio selection over historical or scenario returns: minimise the
// mean absolute deviation (MAD), the conditional value-at-risk (CVaR, in the
// Rockafellar-Uryasev linearisation) or the worst-case loss (minimax), subject
// to a budget (weights summing to one, or a dollar amount), a minimum expected
// return, a cap per asset and optional sector limits / minimum holdings. LP.
//
// Generator: draws returns from a one-factor model in hundredths of a percent,
// recentred so every asset's average return has at most two decimals; plants a
// return-tilted portfolio and derives the cap, the return target and every side
// condition from it, so the planted portfolio is feasible.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Risk { mad, cvar, minimax };
enum class Periods { months, years, scenarios };

struct Theme {
  Risk risk;
  bool dollars;  // amounts in dollars (else fractions of the budget)
  Periods periods;
  bool table;
  std::string intro;                                // {org}, {budget}
  double mu_lo, mu_hi, vol_lo, vol_hi, market_vol;  // percent
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {Risk::mad, false, Periods::months, true,
       "A financial adviser at {org} is building a low-risk portfolio for a cautious client.", 0.2,
       1.5, 0.3, 5, 2.5},
      {Risk::cvar, true, Periods::scenarios, true,
       "The treasury team of {org} will invest {budget} of surplus cash and wants to limit its "
       "exposure to bad economic outcomes.",
       2, 10, 1.5, 18, 8},
      {Risk::minimax, false, Periods::years, false,
       "A university endowment advised by {org} wants a portfolio whose worst year, judged on "
       "recent history, is as good as possible.",
       2, 12, 1, 20, 8},
      {Risk::mad, true, Periods::years, false,
       "A family office managed by {org} is investing {budget} and measures risk as the mean "
       "absolute deviation of the portfolio's yearly return from its average.",
       2, 12, 1, 20, 8},
      {Risk::cvar, false, Periods::months, true,
       "The risk desk of {org} is choosing the weights of a fund and controls tail risk with the "
       "conditional value-at-risk (CVaR) of the monthly loss.",
       0.2, 1.5, 0.3, 5, 2.5},
      {Risk::minimax, true, Periods::scenarios, true,
       "{org} will place {budget} in a set of funds and, being very risk-averse, wants to "
       "minimise the loss in the worst of several equally likely economic scenarios.",
       2, 10, 1.5, 18, 8},
  };
  return t;
}

const std::vector<std::string>& scenario_names() {
  static const std::vector<std::string> v = {
      "boom",        "steady growth",  "stagnation",  "recession",     "inflation shock",
      "rate cut",    "commodity boom", "tech rally",  "credit crunch", "recovery",
      "trade war",   "soft landing",   "bull market", "bear market",   "currency crisis",
      "energy shock"};
  return v;
}

// Asset names with their place on the risk/return line (0 = cash-like, 1 = most volatile), so
// that a money-market fund never swings like a biotech fund.
const std::vector<std::pair<std::string, double>>& asset_pool() {
  static const std::vector<std::pair<std::string, double>> v = {
      {"Money Market", 0.0},     {"US Treasuries", 0.08},   {"Municipal Bonds", 0.12},
      {"Euro Bonds", 0.18},      {"Green Bonds", 0.2},      {"Corporate Bonds", 0.28},
      {"Utilities", 0.35},       {"Consumer Staples", 0.4}, {"Dividend Fund", 0.45},
      {"Insurers", 0.5},         {"Telecoms", 0.5},         {"Infrastructure", 0.5},
      {"Index Fund", 0.55},      {"Value Fund", 0.55},      {"Healthcare Fund", 0.55},
      {"Real Estate Fund", 0.6}, {"REIT Index", 0.6},       {"Gold", 0.6},
      {"Banks", 0.65},           {"Transport Fund", 0.65},  {"Growth Fund", 0.7},
      {"Silver", 0.75},          {"Commodities", 0.75},     {"Energy Stocks", 0.75},
      {"Tech Stocks", 0.8},      {"Small Caps", 0.8},       {"Asia Fund", 0.8},
      {"Emerging Markets", 0.9}, {"Latin Fund", 0.9},       {"Biotech Fund", 0.95}};
  return v;
}

double round2(double v) {
  return std::round(v * 100.0) / 100.0;
}

class PortfolioInstance : public ThemedInstance<themes> {
 public:
  std::vector<std::string> asset_names, asset_keys;
  std::vector<std::string> period_names, period_keys;
  std::vector<std::vector<double>> ret;  // ret[s][i], percent
  std::vector<double> mu;                // average return per asset, percent
  double budget = 1;                     // 1 (fractions) or dollars
  double cap = 1;                        // per-asset cap, same unit as the budget
  double target = 0;                     // minimum expected return, percent of the budget
  double beta = 0.9;                     // CVaR confidence level
  struct Group {
    std::vector<size_t> assets;
    double limit;  // same unit as the budget
  };
  std::vector<Group> sector_limits;
  struct Holding {
    size_t asset;
    double amount;
  };
  std::vector<Holding> min_holdings;

  bool dollars() const { return theme().dollars; }
  size_t n() const { return asset_keys.size(); }
  size_t periods() const { return period_keys.size(); }
  // Returns are percentages; a dollar position earns r/100 dollars per dollar.
  double scale() const { return dollars() ? 0.01 : 1.0; }
  std::string var() const { return dollars() ? "x" : "w"; }

  json size() const override {
    return {{"assets", n()},
            {"scenarios", periods()},
            {"side_constraints", sector_limits.size() + min_holdings.size()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {theme().risk == Risk::mad    ? "mad"
                                  : theme().risk == Risk::cvar ? "cvar"
                                                               : "minimax"};
    v.push_back(dollars() ? "dollar_budget" : "weights");
    if (!sector_limits.empty()) v.push_back("sector_limit");
    if (!min_holdings.empty()) v.push_back("min_holding");
    return v;
  }

  // A budget share in the story's unit: "35%" or "$35,000".
  std::string share(double v) const {
    return dollars() ? text::money(v) : text::num(round2(v * 100)) + "%";
  }
  std::string pct(double v) const { return text::num(v) + "%"; }
  std::string period_word() const {
    switch (theme().periods) {
      case Periods::months:
        return "month";
      case Periods::years:
        return "year";
      case Periods::scenarios:
        return "scenario";
    }
    return "scenario";
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out =
        text::fill(th.intro, {{"{org}", org}, {"{budget}", text::money(budget)}}) + " ";
    out += "The candidate assets are " + text::english_list(asset_names) + ". ";
    if (th.periods == Periods::months)
      out += "Their returns (in percent) over the last " + std::to_string(periods()) +
             " months are used as equally likely scenarios for next month";
    else if (th.periods == Periods::years)
      out += "Their yearly returns (in percent) over " + std::to_string(periods()) +
             " past years are used as equally likely scenarios for the coming year";
    else
      out += "Analysts estimate their returns (in percent) under " + std::to_string(periods()) +
             " equally likely economic scenarios";
    out += "; the expected return of an asset is its average over the " + period_word() +
           "s, shown as well.\n\n";
    if (th.table) {
      std::vector<std::string> header = {text::capitalize(period_word())};
      for (const auto& a : asset_names) header.push_back(a);
      std::vector<std::vector<std::string>> rows;
      for (size_t s = 0; s < periods(); ++s) {
        std::vector<std::string> row = {period_names[s]};
        for (size_t i = 0; i < n(); ++i) row.push_back(text::num(ret[s][i]));
        rows.push_back(row);
      }
      std::vector<std::string> avg = {"Average"};
      for (size_t i = 0; i < n(); ++i) avg.push_back(text::num(mu[i]));
      rows.push_back(avg);
      out += text::markdown_table(header, rows) + "\n";
    } else {
      std::vector<std::string> labels;
      for (const auto& p : period_names) labels.push_back(p);
      out += "Returns by " + period_word() + " (" + text::english_list(labels) + "):\n";
      for (size_t i = 0; i < n(); ++i) {
        std::vector<std::string> values;
        for (size_t s = 0; s < periods(); ++s) values.push_back(pct(ret[s][i]));
        out +=
            "- " + asset_names[i] + ": " + join(values, ", ") + " (average " + pct(mu[i]) + ").\n";
      }
      out += "\n";
    }
    if (dollars())
      out += "The whole " + text::money(budget) + " must be invested";
    else
      out += "The portfolio weights must sum to 100% of the budget";
    out += ", short selling is not allowed, and no single asset may receive more than " +
           share(cap) + ". ";
    out += "The expected return of the portfolio must be at least " + pct(target) +
           (dollars() ? " of the amount invested. " : ". ");
    for (const auto& g : sector_limits) {
      std::vector<std::string> names;
      for (size_t i : g.assets) names.push_back(asset_names[i]);
      out += text::english_list(names) +
             " belong to the same sector; together they may hold at "
             "most " +
             share(g.limit) + ". ";
    }
    for (const auto& h : min_holdings)
      out += "At least " + share(h.amount) + " must be held in " + asset_names[h.asset] +
             " for liquidity. ";
    out += "Fractional amounts are allowed. ";
    const std::string unit = dollars() ? "dollars" : "percentage points";
    switch (th.risk) {
      case Risk::mad:
        out += "Choose the " + std::string(dollars() ? "amounts" : "weights") +
               " that minimise the mean absolute deviation of the portfolio return from its "
               "expected return across the " +
               period_word() + "s (measured in " + unit + "), and report that minimum.";
        break;
      case Risk::cvar:
        out += "The loss in a " + period_word() + " is the negative of the portfolio return (in " +
               unit + "). Choose the " + (dollars() ? "amounts" : "weights") +
               " that minimise the conditional value-at-risk of the loss at the " +
               text::num(beta * 100) +
               "% confidence level (the Rockafellar-Uryasev formula over equally likely " +
               period_word() + "s), and report that minimum.";
        break;
      case Risk::minimax:
        out += "The loss in a " + period_word() + " is the negative of the portfolio return (in " +
               unit + "). Choose the " + (dollars() ? "amounts" : "weights") +
               " that minimise the largest loss over all " + period_word() +
               "s, and report that minimum (negative if the worst " + period_word() +
               " still gains).";
        break;
    }
    return out;
  }

  std::string alg() const override {
    const Theme& th = theme();
    const std::string title = th.risk == Risk::mad    ? "Mean-absolute-deviation portfolio"
                              : th.risk == Risk::cvar ? "CVaR portfolio (Rockafellar-Uryasev)"
                                                      : "Minimax-loss portfolio";
    AlgebraicFormulation f(title);
    const std::string v = var();
    const std::string k = dollars() ? "\\frac{r_{s,i}}{100}" : "r_{s,i}";
    const std::string kdev = dollars() ? "\\frac{r_{s,i} - \\mu_i}{100}" : "(r_{s,i} - \\mu_i)";
    f.set("$I = " + latex_set(asset_keys) + "$", "assets");
    f.set("$S = " + latex_set(period_keys) + "$", "equally likely " + period_word() + "s");
    f.parameter("$r_{s,i}$", "return of asset $i$ in " + period_word() + " $s$ (percent)",
                latex_matrix(ret));
    f.parameter("$\\mu_i$", "expected (average) return of $i$ (percent)", latex_vector(mu));
    if (dollars()) f.parameter("$B$", "budget (dollars)", text::num(budget));
    f.parameter("$U$", std::string("cap per asset (") + (dollars() ? "dollars" : "fraction") + ")",
                text::num(cap));
    f.parameter("$R$", "minimum expected return (percent)", text::num(target));
    if (th.risk == Risk::cvar) f.parameter("$\\beta$", "CVaR confidence level", text::num(beta));
    f.variable("$" + v + "_i \\ge 0$",
               dollars() ? "dollars invested in $i$" : "fraction of the budget in $i$");
    switch (th.risk) {
      case Risk::mad:
        f.variable("$y_s \\ge 0$", "absolute deviation of the portfolio return in $s$");
        f.objective("\\min \\frac{1}{|S|} \\sum_{s \\in S} y_s",
                    "Minimise the mean absolute deviation");
        break;
      case Risk::cvar:
        f.variable("$\\zeta$ (free)", "value-at-risk threshold");
        f.variable("$e_s \\ge 0$", "loss in $s$ above the threshold");
        f.objective("\\min \\zeta + \\frac{1}{(1 - \\beta)|S|} \\sum_{s \\in S} e_s",
                    "Minimise the conditional value-at-risk of the loss");
        break;
      case Risk::minimax:
        f.variable("$z$ (free)", "largest loss over all " + period_word() + "s");
        f.objective("\\min z", "Minimise the worst-case loss");
        break;
    }
    f.constraint("budget", "\\sum_{i \\in I} " + v + "_i = " + (dollars() ? "B" : "1"));
    f.constraint("minimum expected return",
                 dollars() ? "\\sum_{i \\in I} \\frac{\\mu_i}{100} x_i \\ge \\frac{R}{100} B"
                           : "\\sum_{i \\in I} \\mu_i w_i \\ge R");
    f.constraint("cap per asset", v + "_i \\le U \\quad \\forall i \\in I");
    switch (th.risk) {
      case Risk::mad:
        f.constraint("deviation above",
                     "y_s \\ge \\sum_{i \\in I} " + kdev + " " + v + "_i \\quad \\forall s \\in S");
        f.constraint("deviation below", "y_s \\ge -\\sum_{i \\in I} " + kdev + " " + v +
                                            "_i \\quad \\forall s \\in S");
        break;
      case Risk::cvar:
        f.constraint("excess loss", "e_s \\ge -\\sum_{i \\in I} " + k + " " + v +
                                        "_i - \\zeta \\quad \\forall s \\in S");
        break;
      case Risk::minimax:
        f.constraint("worst case",
                     "z \\ge -\\sum_{i \\in I} " + k + " " + v + "_i \\quad \\forall s \\in S");
        break;
    }
    for (const auto& g : sector_limits) {
      std::vector<std::string> terms;
      for (size_t i : g.assets) terms.push_back(v + "_{" + latex_name(asset_keys[i]) + "}");
      f.constraint("sector limit", join(terms, " + ") + " \\le " + text::num(g.limit));
    }
    for (const auto& h : min_holdings)
      f.constraint("minimum holding",
                   v + "_{" + latex_name(asset_keys[h.asset]) + "} \\ge " + text::num(h.amount));
    return f.markdown();
  }

  std::string gmpl() const override {
    const Theme& th = theme();
    const std::string v = var();
    const std::string div = dollars() ? " / 100" : "";
    std::string model = "set I;\nset S;\nparam r{S, I};\nparam mu{I};\n";
    if (dollars()) model += "param B > 0;\n";
    model += "param U >= 0;\nparam R;\n";
    if (th.risk == Risk::cvar) model += "param beta > 0, < 1;\n";
    model += "var " + v + "{I} >= 0;\n";
    switch (th.risk) {
      case Risk::mad:
        model += "var y{S} >= 0;\n";
        model += "minimize Risk: (1 / card(S)) * sum{s in S} y[s];\n";
        break;
      case Risk::cvar:
        model += "var zeta;\nvar excess{S} >= 0;\n";
        model += "minimize Risk: zeta + 1 / ((1 - beta) * card(S)) * sum{s in S} excess[s];\n";
        break;
      case Risk::minimax:
        model += "var z;\n";
        model += "minimize Risk: z;\n";
        break;
    }
    model += "s.t. Budget: sum{i in I} " + v + "[i] = " + (dollars() ? "B" : "1") + ";\n";
    model += dollars() ? "s.t. Return: sum{i in I} mu[i] / 100 * x[i] >= R / 100 * B;\n"
                       : "s.t. Return: sum{i in I} mu[i] * w[i] >= R;\n";
    model += "s.t. Cap{i in I}: " + v + "[i] <= U;\n";
    switch (th.risk) {
      case Risk::mad:
        model += "s.t. DevAbove{s in S}: y[s] >= sum{i in I} (r[s, i] - mu[i])" + div + " * " + v +
                 "[i];\n";
        model += "s.t. DevBelow{s in S}: y[s] >= -sum{i in I} (r[s, i] - mu[i])" + div + " * " + v +
                 "[i];\n";
        break;
      case Risk::cvar:
        model += "s.t. Excess{s in S}: excess[s] >= -sum{i in I} r[s, i]" + div + " * " + v +
                 "[i] - zeta;\n";
        break;
      case Risk::minimax:
        model += "s.t. Worst{s in S}: z >= -sum{i in I} r[s, i]" + div + " * " + v + "[i];\n";
        break;
    }
    for (size_t k = 0; k < sector_limits.size(); ++k) {
      std::vector<std::string> terms;
      for (size_t i : sector_limits[k].assets) terms.push_back(v + "['" + asset_keys[i] + "']");
      model += "s.t. Sector" + std::to_string(k + 1) + ": " + join(terms, " + ") +
               " <= " + text::num(sector_limits[k].limit) + ";\n";
    }
    for (size_t k = 0; k < min_holdings.size(); ++k)
      model += "s.t. MinHolding" + std::to_string(k + 1) + ": " + v + "['" +
               asset_keys[min_holdings[k].asset] + "'] >= " + text::num(min_holdings[k].amount) +
               ";\n";
    GmplData data;
    data.set("I", asset_keys).set("S", period_keys);
    data.param("r", period_keys, asset_keys, ret).param("mu", asset_keys, mu);
    if (dollars()) data.param("B", budget);
    data.param("U", cap).param("R", target);
    if (th.risk == Risk::cvar) data.param("beta", beta);
    return compose_gmpl(model, "Risk", data);
  }

  // Portfolio return in scenario s, in the objective's unit.
  double scenario_return(const std::vector<double>& x, size_t s) const {
    double total = 0;
    for (size_t i = 0; i < n(); ++i) total += ret[s][i] * scale() * x[i];
    return total;
  }

  // The risk measure of a portfolio computed directly from its holdings.
  double risk_of(const std::vector<double>& x) const {
    const double S = static_cast<double>(periods());
    double expected = 0;
    for (size_t i = 0; i < n(); ++i) expected += mu[i] * scale() * x[i];
    std::vector<double> loss(periods());
    for (size_t s = 0; s < periods(); ++s) loss[s] = -scenario_return(x, s);
    switch (theme().risk) {
      case Risk::mad: {
        double sum = 0;
        for (size_t s = 0; s < periods(); ++s) sum += std::fabs(-loss[s] - expected);
        return sum / S;
      }
      case Risk::cvar: {
        // The Rockafellar-Uryasev function is piecewise linear and convex in the threshold
        // with breakpoints at the scenario losses, so its minimum is at one of them.
        const double weight = 1.0 / ((1.0 - beta) * S);
        double best = 1e300;
        for (double zeta : loss) {
          double value = zeta;
          for (double l : loss) value += weight * std::max(0.0, l - zeta);
          best = std::min(best, value);
        }
        return best;
      }
      case Risk::minimax:
        return *std::max_element(loss.begin(), loss.end());
    }
    return 0;
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    const std::string v = var();
    std::vector<double> x(n());
    double total = 0, expected = 0;
    for (size_t i = 0; i < n(); ++i) {
      x[i] = s.value(v, {asset_keys[i]});
      c.ge(x[i], 0, v + "[" + asset_keys[i] + "] nonnegative");
      c.le(x[i], cap, "cap on " + asset_keys[i]);
      total += x[i];
      expected += mu[i] * x[i];
    }
    c.eq(total, budget, "budget");
    c.ge(expected, target * budget, "minimum expected return");
    for (const auto& g : sector_limits) {
      double held = 0;
      for (size_t i : g.assets) held += x[i];
      c.le(held, g.limit, "sector limit");
    }
    for (const auto& h : min_holdings)
      c.ge(x[h.asset], h.amount, "minimum holding in " + asset_keys[h.asset]);
    // The linearisation's auxiliary variables must bound the quantities they stand for.
    double expected_scaled = 0;
    for (size_t i = 0; i < n(); ++i) expected_scaled += mu[i] * scale() * x[i];
    for (size_t p = 0; p < periods(); ++p) {
      const std::string key = period_keys[p];
      const double port = scenario_return(x, p);
      switch (theme().risk) {
        case Risk::mad:
          c.ge(s.value("y", {key}), std::fabs(port - expected_scaled), "deviation in " + key);
          break;
        case Risk::cvar: {
          const double excess = s.value("excess", {key});
          c.ge(excess, 0, "excess[" + key + "] nonnegative");
          c.ge(excess, -port - s.value("zeta"), "excess loss in " + key);
          break;
        }
        case Risk::minimax:
          c.ge(s.value("z"), -port, "worst-case loss in " + key);
          break;
      }
    }
    return c.result(risk_of(x));
  }
};

class PortfolioFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "portfolio"; }
  std::string_view title() const override {
    return "Portfolio selection (linear risk: MAD, CVaR, minimax)";
  }
  ProblemClass problem_class() const override { return ProblemClass::lp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<PortfolioInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const size_t n = static_cast<size_t>(size_for(rng, options.difficulty, {3, 4}, {4, 6}, {6, 8}));
    size_t S = static_cast<size_t>(size_for(rng, options.difficulty, {5, 6}, {6, 10}, {10, 14}));
    S = std::max(S, n + 1);  // more scenarios than assets: no riskless combination by accident
    inst->org = rng.pick(text::companies());
    std::vector<double> riskiness;
    for (size_t k : rng.sample(asset_pool().size(), n)) {
      inst->asset_names.push_back(asset_pool()[k].first);
      riskiness.push_back(asset_pool()[k].second);
    }
    inst->asset_keys = text::symbols(inst->asset_names);
    switch (th.periods) {
      case Periods::months:
        for (size_t s = 0; s < S; ++s) {
          inst->period_names.push_back("Month " + std::to_string(s + 1));
          inst->period_keys.push_back("M" + std::to_string(s + 1));
        }
        break;
      case Periods::years: {
        const int last = 2024;
        for (size_t s = 0; s < S; ++s) {
          const int year = last - static_cast<int>(S) + 1 + static_cast<int>(s);
          inst->period_names.push_back(std::to_string(year));
          inst->period_keys.push_back("Y" + std::to_string(year));
        }
        break;
      }
      case Periods::scenarios:
        inst->period_names = text::pick_distinct(rng, scenario_names(), S);
        for (auto& p : inst->period_names) p = text::capitalize(p);
        inst->period_keys = text::symbols(inst->period_names);
        break;
    }
    if (th.dollars) inst->budget = 1000.0 * rng.uniform_int(20, 500);

    // Returns in hundredths of a percent from a one-factor model; riskier assets earn more.
    std::vector<int64_t> mu_c(n);
    std::vector<std::vector<int64_t>> ret_c(S, std::vector<int64_t>(n));
    std::vector<double> market(S);
    for (auto& f : market) f = rng.normal() * th.market_vol;
    for (size_t i = 0; i < n; ++i) {
      const double q = std::clamp(riskiness[i] + rng.uniform(-0.08, 0.08), 0.0, 1.0);
      mu_c[i] = static_cast<int64_t>(std::round(100 * (th.mu_lo + q * (th.mu_hi - th.mu_lo))));
      const double vol = (th.vol_lo + q * (th.vol_hi - th.vol_lo)) * rng.uniform(0.7, 1.3);
      const double beta = (0.1 + 0.9 * q) * rng.uniform(0.7, 1.3);
      std::vector<int64_t> dev(S);
      int64_t sum = 0;
      for (size_t s = 0; s < S; ++s) {
        dev[s] = static_cast<int64_t>(std::round(100 * (beta * market[s] + vol * rng.normal())));
        sum += dev[s];
      }
      // Recentre exactly: deviations sum to zero, so the average is mu_c[i] / 100.
      const int64_t count = static_cast<int64_t>(S);
      const int64_t q_floor = sum >= 0 ? sum / count : -((-sum + count - 1) / count);
      int64_t rem = sum - q_floor * count;  // 0 <= rem < S
      for (size_t s = 0; s < S; ++s) dev[s] -= q_floor;
      for (size_t s : rng.sample(S, static_cast<size_t>(rem))) dev[s] -= 1;
      for (size_t s = 0; s < S; ++s) ret_c[s][i] = mu_c[i] + dev[s];
    }
    inst->ret.assign(S, std::vector<double>(n));
    for (size_t s = 0; s < S; ++s)
      for (size_t i = 0; i < n; ++i) inst->ret[s][i] = static_cast<double>(ret_c[s][i]) / 100;
    for (size_t i = 0; i < n; ++i) inst->mu.push_back(static_cast<double>(mu_c[i]) / 100);

    // Planted portfolio (fractions), tilted towards high-return assets.
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return inst->mu[a] < inst->mu[b]; });
    std::vector<double> w(n, 0.0);
    double wsum = 0;
    for (size_t rank = 0; rank < n; ++rank) {
      w[order[rank]] = rng.uniform(0.2, 1.0) * (1.0 + static_cast<double>(rank) / n);
      wsum += w[order[rank]];
    }
    for (auto& x : w) x /= wsum;
    const double wmax = *std::max_element(w.begin(), w.end());
    static const double kCaps[] = {0.3, 0.35, 0.4, 0.5, 0.6};
    const double cap_frac = std::max(kCaps[rng.index(std::size(kCaps))], std::ceil(wmax * 20) / 20);
    inst->cap = cap_frac * inst->budget;
    double planted_return = 0;
    for (size_t i = 0; i < n; ++i) planted_return += inst->mu[i] * w[i];
    // Target: just below the planted return, in steps of 0.05 percentage points.
    inst->target = std::floor((planted_return - rng.uniform(0.0, 0.1)) * 20) / 20;
    if (th.risk == Risk::cvar) {
      std::vector<double> levels;
      for (double b : {0.75, 0.8, 0.9})
        if ((1 - b) * static_cast<double>(S) >= 1.0 - 1e-9) levels.push_back(b);
      inst->beta = rng.pick(levels);
    }

    // Optional side conditions, each satisfied by the planted portfolio.
    const double step = 0.05;  // limits are whole multiples of 5% of the budget
    if (n >= 4 && rng.bernoulli(options.side_constraint_rate)) {
      // Group two or three of the highest-return assets: the limit then tends to bind.
      const size_t k = std::min<size_t>(n - 2, static_cast<size_t>(rng.uniform_int(2, 3)));
      std::vector<size_t> group(order.end() - static_cast<std::ptrdiff_t>(k), order.end());
      std::sort(group.begin(), group.end());
      double held = 0;
      for (size_t i : group) held += w[i];
      const double limit = std::ceil(held / step + rng.uniform(0.0, 1.0)) * step;
      if (limit < 1.0) inst->sector_limits.push_back({group, round2(limit * inst->budget)});
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      const size_t i = order[rng.index(std::max<size_t>(1, n / 2))];  // a low-return asset
      const double amount = std::floor(w[i] * rng.uniform(0.5, 1.0) / step) * step;
      if (amount > 0) inst->min_holdings.push_back({i, round2(amount * inst->budget)});
    }
    return inst;
  }
};

}  // namespace

const Family& portfolio_family() {
  static const PortfolioFamily family;
  return family;
}

}  // namespace trex::orlib
