// Investment allocation: split a budget among investment options (bonds,
// funds, loans, deposits, ...) with known annual returns to maximise the
// expected return, under the limits such word problems state: a cap on an
// option, a minimum or maximum share of the total, one option at least k times
// another, a minimum amount, and an average risk rating no higher than a
// target. LP.
//
// Generator: plants an allocation of the whole budget that tilts towards
// high-return options, then draws every limit so the plan meets it (caps and
// maximum shares above its amounts, minimum shares and amounts below, ratios
// and the risk target rounded towards slack). The best-paying option always
// gets a cap or a maximum share, so the optimum spreads the money.
#include <algorithm>
#include <cmath>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/rounding.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

struct Option {
  std::string name;
  double low, high;  // annual return range, percent
  int risk;          // risk rating 1 (safe) .. 9
  bool count_noun;   // takes an article in running text: "the index fund", but "gold"
};

struct Theme {
  std::string intro;          // {org}, {budget}
  bool person;                // {org} is a person's name ("Maria has ...") rather than a company
  std::string option;         // "investment option", "type of loan"
  std::string option_plural;  // "investment options", "types of loan"
  std::string gain;           // "return", "interest"
  std::string invested;       // "invested", "lent"
  std::vector<Option> options;
  double budget_lo, budget_hi, budget_step;  // dollars
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} has {budget} of savings to invest for one year.",
       true,
       "investment option",
       "investment options",
       "return",
       "invested",
       {{"savings account", 1.5, 3, 1, true},
        {"government bonds", 3, 5, 2, false},
        {"corporate bonds", 4, 7, 4, false},
        {"index fund", 6, 9, 5, true},
        {"technology stocks", 8, 14, 8, false},
        {"real estate fund", 5, 8, 5, true},
        {"certificate of deposit", 2.5, 4.5, 1, true},
        {"emerging market fund", 9, 15, 9, true}},
       10000,
       200000,
       1000},
      {"The pension fund of {org} is allocating {budget} of new contributions among asset "
       "classes.",
       false,
       "asset class",
       "asset classes",
       "return",
       "invested",
       {{"government bonds", 3, 4.5, 2, false},
        {"corporate bonds", 4, 6.5, 4, false},
        {"domestic equities", 6, 9, 6, false},
        {"international equities", 6.5, 10, 7, false},
        {"real estate", 5, 7.5, 5, false},
        {"infrastructure", 5.5, 8, 4, false},
        {"private equity", 9, 13, 9, false},
        {"cash", 1, 2.5, 1, false}},
       1000000,
       20000000,
       100000},
      {"A bank run by {org} has {budget} available to lend this year.",
       false,
       "type of loan",
       "types of loan",
       "interest",
       "lent",
       {{"home mortgages", 4, 6, 2, false},
        {"car loans", 6, 9, 4, false},
        {"personal loans", 9, 13, 6, false},
        {"small business loans", 7, 11, 6, false},
        {"credit card credit", 14, 20, 9, false},
        {"farm loans", 5, 8, 4, false},
        {"student loans", 4.5, 7, 3, false}},
       1000000,
       50000000,
       100000},
      {"The finance office of {org} wants to place {budget} of surplus cash for the next year.",
       false,
       "instrument",
       "instruments",
       "return",
       "invested",
       {{"treasury bills", 2.5, 4, 1, false},
        {"money market fund", 3, 4.5, 2, true},
        {"commercial paper", 4, 6, 4, false},
        {"term deposits", 3.5, 5, 2, false},
        {"municipal bonds", 3.5, 5.5, 3, false},
        {"corporate bond fund", 4.5, 7, 5, true}},
       100000,
       5000000,
       10000},
      {"The endowment of {org} has {budget} to allocate among investment funds.",
       false,
       "fund",
       "funds",
       "return",
       "invested",
       {{"bond fund", 3, 5, 2, true},
        {"dividend fund", 5, 7.5, 4, true},
        {"growth fund", 7, 11, 7, true},
        {"green energy fund", 6, 10, 6, true},
        {"property fund", 5, 8, 5, true},
        {"commodity fund", 6, 12, 8, true},
        {"ethical equity fund", 6, 9, 5, true}},
       500000,
       10000000,
       50000},
      {"{org} inherited {budget} and wants to invest it.",
       true,
       "investment",
       "investments",
       "return",
       "invested",
       {{"bank deposit", 1.5, 3, 1, true},
        {"gold", 3, 6, 5, false},
        {"rental apartment fund", 4.5, 7, 4, true},
        {"blue-chip stocks", 6, 9, 6, false},
        {"small-cap stocks", 8, 13, 8, false},
        {"bond ladder", 3, 5, 2, true},
        {"crypto fund", 10, 18, 9, true}},
       20000,
       500000,
       1000},
  };
  return t;
}

// Drops the error of a multiple of 0.05 (0.35000000000000003 -> 0.35).
double hundredths(double v) {
  return std::round(v * 100) / 100;
}

class InvestmentInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> names, keys;
  std::vector<double> rate;  // annual return, percent
  std::vector<int> risk;     // ratings; used only with a risk target
  double budget = 0;
  bool invest_all = false;        // the whole budget must be placed
  std::vector<double> cap;        // max amount; < 0: none
  std::vector<double> min_share;  // of the total placed, as a fraction; < 0: none
  std::vector<double> max_share;
  std::vector<double> min_amount;  // < 0: none
  struct Ratio {
    size_t a, b;
    double k;  // x_a >= k x_b
  };
  std::vector<Ratio> ratios;
  double risk_target = 0;  // average rating at most this; 0: none

  std::vector<bool> count_noun;  // per option: takes an article in running text

  size_t n() const { return names.size(); }
  // "the index fund" / "gold", and "an index fund" / "gold".
  std::string the(size_t i) const { return count_noun[i] ? "the " + names[i] : names[i]; }
  std::string a(size_t i) const {
    return count_noun[i] ? text::article(names[i]) + " " + names[i] : names[i];
  }
  std::string The(size_t i) const { return text::capitalize(the(i)); }
  std::vector<size_t> with(const std::vector<double>& v) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < n(); ++i)
      if (v[i] >= 0) out.push_back(i);
    return out;
  }
  int side_count() const {
    return static_cast<int>(with(cap).size() + with(min_share).size() + with(max_share).size() +
                            with(min_amount).size() + ratios.size()) +
           (risk_target > 0);
  }

  json size() const override { return {{"options", n()}, {"side_constraints", side_count()}}; }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (invest_all) v.push_back("invest_all");
    if (!with(cap).empty()) v.push_back("cap");
    if (!with(min_share).empty()) v.push_back("min_share");
    if (!with(max_share).empty()) v.push_back("max_share");
    if (!with(min_amount).empty()) v.push_back("min_amount");
    if (!ratios.empty()) v.push_back("ratio");
    if (risk_target > 0) v.push_back("risk_target");
    return v;
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    text.fact(text::fill(th.intro, {{"{org}", org}, {"{budget}", style.money(budget)}}));
    std::vector<std::string> listed;
    for (size_t i = 0; i < n(); ++i) listed.push_back(a(i));
    text.fact(text::fill(
        style.pick({"There are {k} {options} to choose from: {list}.", "The candidates are {list}.",
                    "The money can go into {k} {options}: {list}."}),
        {{"{k}", style.count(static_cast<long>(n()))},
         {"{options}", th.option_plural},
         {"{list}", text::english_list(listed)}}));
    if (!th.person) text.distractors(org, 1, 0.25);
    text.paragraph(false);

    // Bullets read as notes ("- Gold: expected return 4% a year"); sentences
    // have a subject that agrees with any option ("Money placed in gold earns ...").
    const text::Layout layout = style.layout(
        {text::Layout::table, text::Layout::bullets, text::Layout::rows, text::Layout::columns});
    const bool notes = layout == text::Layout::bullets;
    text::Records records;
    records.row_header = text::capitalize(th.option);
    records.names = names;
    for (size_t i = 0; i < n(); ++i) records.row_subjects.push_back("money placed in " + the(i));
    {
      text::Attribute at;
      at.header = "Annual " + th.gain + " (%)";
      at.label = "expected annual " + th.gain + " rates in percent";
      const std::string form =
          notes ? style.pick({"expected " + th.gain + " {r} a year", "{r} a year"})
                : style.pick({"earns {r} a year", "is expected to return {r} a year",
                              "yields {r} per year"});
      for (size_t i = 0; i < n(); ++i) {
        at.cells.push_back(style.num(rate[i]));
        at.phrases.push_back(text::fill(form, {{"{r}", style.percent(rate[i])}}));
      }
      records.attributes.push_back(std::move(at));
    }
    if (risk_target > 0) {
      text::Attribute at;
      at.header = "Risk rating";
      at.label = "risk ratings";
      for (size_t i = 0; i < n(); ++i) {
        at.cells.push_back(std::to_string(risk[i]));
        at.phrases.push_back((notes ? "risk rating " : "carries a risk rating of ") +
                             std::to_string(risk[i]));
      }
      records.attributes.push_back(std::move(at));
    }
    text.block(text::render_records(style, layout, records));

    text.fact(invest_all ? style.pick({"The whole amount must be " + th.invested + ".",
                                       "All of the money has to be placed."})
                         : style.pick({"Not all of the money has to be " + th.invested + ".",
                                       "Money that is not " + th.invested + " earns nothing."}));
    for (size_t i : with(cap))
      text.fact(text::fill(
          style.pick({"At most {v} can go into {o}.", "No more than {v} may be placed in {o}.",
                      "The amount in {o} is limited to {v}."}),
          {{"{v}", style.money(cap[i])}, {"{o}", the(i)}}));
    for (size_t i : with(min_amount))
      text.fact(text::fill(style.pick({"At least {v} must go into {o}.",
                                       "A minimum of {v} has to be placed in {o}."}),
                           {{"{v}", style.money(min_amount[i])}, {"{o}", the(i)}}));
    for (size_t i : with(min_share))
      text.fact(
          text::fill(style.pick({"At least {s} of the money {invested} must be in {o}.",
                                 "{O} must make up no less than {s} of the total {invested}."}),
                     {{"{s}", style.percent(std::round(min_share[i] * 100))},
                      {"{o}", the(i)},
                      {"{O}", The(i)},
                      {"{invested}", th.invested}}));
    for (size_t i : with(max_share))
      text.fact(
          text::fill(style.pick({"At most {s} of the total {invested} may be in {o}.",
                                 "{O} can account for no more than {s} of the money {invested}."}),
                     {{"{s}", style.percent(std::round(max_share[i] * 100))},
                      {"{o}", the(i)},
                      {"{O}", The(i)},
                      {"{invested}", th.invested}}));
    for (const Ratio& q : ratios)
      text.fact(text::fill(
          q.k == 1 ? style.pick({"At least as much must go into {a} as into {b}.",
                                 "The amount in {a} may not be less than the amount in {b}."})
                   : style.pick({"The amount in {a} must be at least {k} times the amount in {b}.",
                                 "For every dollar in {b}, at least {k} dollars must go into "
                                 "{a}."}),
          {{"{a}", the(q.a)}, {"{b}", the(q.b)}, {"{k}", style.num(q.k)}}));
    if (risk_target > 0)
      text.fact(text::fill(
          style.pick({"The average risk rating of the money {invested}, weighted by amount, may "
                      "not exceed {r}.",
                      "To limit risk, the dollar-weighted average risk rating must be at most "
                      "{r}."}),
          {{"{r}", style.num(risk_target)}, {"{invested}", th.invested}}));
    text.paragraph();
    text.fact(text::question(style,
                             style.pick({"how much to put into each " + th.option,
                                         "the amount to place in each " + th.option,
                                         "how to split the money among the " + th.option_plural}),
                             "maximise the total expected annual " + th.gain,
                             style.pick({"the maximum annual " + th.gain + " in dollars",
                                         "the largest expected " + th.gain + " per year",
                                         "the optimal annual " + th.gain})));
    return text.text();
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f("Investment allocation");
    f.set("$A = " + latex_set(keys) + "$", th.option_plural);
    std::vector<double> r;
    for (double v : rate) r.push_back(v / 100);
    f.parameter("$r_a$", "expected annual " + th.gain + " rate of $a$", latex_vector(r));
    f.parameter("$B$", "budget (dollars)", text::num(budget));
    auto subset_values = [&](const std::vector<double>& v, double scale) {
      std::vector<std::string> parts;
      for (size_t i : with(v))
        parts.push_back(latex_name(keys[i]) + ": " + text::num(v[i] * scale));
      std::string out = "(";
      out += join(parts, ", ");
      return out + ")";
    };
    if (!with(cap).empty()) f.parameter("$U_a$", "cap on $a$ (dollars)", subset_values(cap, 1));
    if (!with(min_amount).empty())
      f.parameter("$L_a$", "minimum amount in $a$ (dollars)", subset_values(min_amount, 1));
    if (!with(min_share).empty())
      f.parameter("$s^{\\min}_a$", "minimum share of the total in $a$",
                  subset_values(min_share, 1));
    if (!with(max_share).empty())
      f.parameter("$s^{\\max}_a$", "maximum share of the total in $a$",
                  subset_values(max_share, 1));
    if (risk_target > 0) {
      std::vector<double> rk(risk.begin(), risk.end());
      f.parameter("$\\rho_a$", "risk rating of $a$", latex_vector(rk));
      f.parameter("$\\bar\\rho$", "maximum average risk rating", text::num(risk_target));
    }
    f.variable("$x_a \\ge 0$", "dollars placed in $a$");
    f.objective("\\max \\sum_{a \\in A} r_a x_a", "Maximise the expected annual " + th.gain);
    f.constraint("budget",
                 std::string("\\sum_{a \\in A} x_a ") + (invest_all ? "=" : "\\le") + " B");
    if (!with(cap).empty()) f.constraint("caps", "x_a \\le U_a");
    if (!with(min_amount).empty()) f.constraint("minimum amounts", "x_a \\ge L_a");
    if (!with(min_share).empty())
      f.constraint("minimum shares", "x_a \\ge s^{\\min}_a \\sum_{b \\in A} x_b");
    if (!with(max_share).empty())
      f.constraint("maximum shares", "x_a \\le s^{\\max}_a \\sum_{b \\in A} x_b");
    for (const Ratio& q : ratios)
      f.constraint("ratio", "x_{" + latex_name(keys[q.a]) + "} \\ge " + text::num(q.k) + " x_{" +
                                latex_name(keys[q.b]) + "}");
    if (risk_target > 0)
      f.constraint("average risk",
                   "\\sum_{a \\in A} \\rho_a x_a \\le \\bar\\rho \\sum_{a \\in A} x_a");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model = "set A;\nparam r{A};\nparam B > 0;\n";
    auto subset = [&](const std::string& set, const std::string& param,
                      const std::vector<double>& v) {
      if (!with(v).empty())
        model += "set " + set + " within A;\nparam " + param + "{" + set + "};\n";
    };
    subset("ACAP", "U", cap);
    subset("AMIN", "L", min_amount);
    subset("ASMIN", "smin", min_share);
    subset("ASMAX", "smax", max_share);
    if (risk_target > 0) model += "param risk{A};\nparam R;\n";
    model += "var x{A} >= 0;\n";
    model += "maximize Return: sum{a in A} r[a] * x[a];\n";
    model += std::string("s.t. Budget: sum{a in A} x[a] ") + (invest_all ? "=" : "<=") + " B;\n";
    if (!with(cap).empty()) model += "s.t. Cap{a in ACAP}: x[a] <= U[a];\n";
    if (!with(min_amount).empty()) model += "s.t. MinAmount{a in AMIN}: x[a] >= L[a];\n";
    if (!with(min_share).empty())
      model += "s.t. MinShare{a in ASMIN}: x[a] >= smin[a] * sum{b in A} x[b];\n";
    if (!with(max_share).empty())
      model += "s.t. MaxShare{a in ASMAX}: x[a] <= smax[a] * sum{b in A} x[b];\n";
    for (size_t k = 0; k < ratios.size(); ++k)
      model += "s.t. Ratio" + std::to_string(k + 1) + ": x['" + keys[ratios[k].a] +
               "'] >= " + text::num(ratios[k].k) + " * x['" + keys[ratios[k].b] + "'];\n";
    if (risk_target > 0)
      model += "s.t. Risk: sum{a in A} risk[a] * x[a] <= R * sum{a in A} x[a];\n";

    GmplData data;
    std::vector<double> r;
    for (double v : rate) r.push_back(v / 100);
    data.set("A", keys).param("r", keys, r).param("B", budget);
    auto subset_data = [&](const std::string& set, const std::string& param,
                           const std::vector<double>& v) {
      std::vector<std::string> k;
      std::vector<double> values;
      for (size_t i : with(v)) {
        k.push_back(keys[i]);
        values.push_back(v[i]);
      }
      if (!k.empty()) data.set(set, k).param(param, k, values);
    };
    subset_data("ACAP", "U", cap);
    subset_data("AMIN", "L", min_amount);
    subset_data("ASMIN", "smin", min_share);
    subset_data("ASMAX", "smax", max_share);
    if (risk_target > 0) {
      std::vector<double> rk(risk.begin(), risk.end());
      data.param("risk", keys, rk).param("R", risk_target);
    }
    return compose_gmpl(model, "Return", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> x(n());
    double total = 0, objective = 0, weighted_risk = 0;
    for (size_t i = 0; i < n(); ++i) {
      x[i] = s.value("x", {keys[i]});
      c.ge(x[i], 0, "x[" + keys[i] + "] nonnegative");
      total += x[i];
      objective += rate[i] / 100 * x[i];
      weighted_risk += risk[i] * x[i];
    }
    if (invest_all)
      c.eq(total, budget, "whole budget invested");
    else
      c.le(total, budget, "budget");
    for (size_t i : with(cap)) c.le(x[i], cap[i], "cap on " + keys[i]);
    for (size_t i : with(min_amount)) c.ge(x[i], min_amount[i], "minimum amount in " + keys[i]);
    for (size_t i : with(min_share))
      c.ge(x[i], min_share[i] * total, "minimum share of " + keys[i]);
    for (size_t i : with(max_share))
      c.le(x[i], max_share[i] * total, "maximum share of " + keys[i]);
    for (const Ratio& q : ratios)
      c.ge(x[q.a], q.k * x[q.b], "ratio " + keys[q.a] + "/" + keys[q.b]);
    if (risk_target > 0) c.le(weighted_risk, risk_target * total, "average risk rating");
    return c.result(objective);
  }
};

class InvestmentFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "investment_allocation"; }
  std::string_view title() const override {
    return "Investment allocation (returns; caps, shares, ratios, average risk)";
  }
  ProblemClass problem_class() const override { return ProblemClass::lp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<InvestmentInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const size_t n = static_cast<size_t>(size_for(rng, options.difficulty, {2, 3}, {3, 5}, {5, 7}));
    inst->org = th.person ? rng.pick(text::people()) : rng.pick(text::companies());
    std::vector<size_t> chosen = rng.sample(th.options.size(), std::min(n, th.options.size()));
    std::sort(chosen.begin(), chosen.end());
    for (size_t o : chosen) {
      const Option& opt = th.options[o];
      inst->names.push_back(opt.name);
      inst->keys.push_back(text::symbol(opt.name));
      // Returns in quarter percents: "4.25%" keeps two decimals in the model's 0.0425.
      inst->rate.push_back(std::round(rng.uniform(opt.low, opt.high) * 4) / 4);
      inst->risk.push_back(opt.risk);
      inst->count_noun.push_back(opt.count_noun);
    }
    const size_t m = inst->names.size();
    const double unit = th.budget_step;
    inst->budget = round_up(rng.uniform(th.budget_lo, th.budget_hi), unit * 10);
    inst->invest_all = rng.bernoulli(0.5);

    // Planted allocation of the whole budget, tilted towards higher returns, in budget steps.
    std::vector<double> weight(m);
    double wsum = 0;
    for (size_t i = 0; i < m; ++i) {
      weight[i] = rng.uniform(0.3, 1.0) * (1 + inst->rate[i] / 10);
      wsum += weight[i];
    }
    std::vector<double> plan(m);
    double placed = 0;
    for (size_t i = 0; i + 1 < m; ++i) {
      plan[i] = round_down(inst->budget * weight[i] / wsum, unit);
      placed += plan[i];
    }
    plan[m - 1] = inst->budget - placed;

    inst->cap.assign(m, -1);
    inst->min_share.assign(m, -1);
    inst->max_share.assign(m, -1);
    inst->min_amount.assign(m, -1);
    const size_t best = static_cast<size_t>(std::max_element(inst->rate.begin(), inst->rate.end()) -
                                            inst->rate.begin());
    auto add_cap = [&](size_t i) {
      inst->cap[i] = round_up(plan[i] * rng.uniform(1.0, 1.3), unit);
    };
    auto add_max_share = [&](size_t i) {
      inst->max_share[i] =
          std::min(0.95, hundredths(round_up(plan[i] / inst->budget + 0.02, 0.05)));
    };
    // The best-paying option is always limited; otherwise everything would go there.
    if (rng.bernoulli(0.5))
      add_cap(best);
    else
      add_max_share(best);
    const double rate_side = options.side_constraint_rate;
    const double extra = options.difficulty == Difficulty::easy ? 0.3 : 0.5;
    for (size_t i = 0; i < m; ++i) {
      if (i == best) continue;
      if (rng.bernoulli(extra * 0.5)) add_cap(i);
      if (rng.bernoulli(extra * 0.5)) add_max_share(i);
      if (rng.bernoulli(extra * 0.5) && plan[i] / inst->budget >= 0.1)
        inst->min_share[i] = hundredths(round_down(plan[i] / inst->budget - 0.02, 0.05));
      if (rng.bernoulli(rate_side * 0.3) && plan[i] >= unit)
        inst->min_amount[i] = round_down(plan[i] * rng.uniform(0.5, 0.9), unit);
      if (inst->min_share[i] == 0) inst->min_share[i] = -1;
      if (inst->min_amount[i] == 0) inst->min_amount[i] = -1;
    }
    if (rng.bernoulli(rate_side)) {
      static const double kRatios[] = {0.5, 1, 1.5, 2, 3};
      for (int attempt = 0; attempt < 20; ++attempt) {
        const size_t a = rng.index(m), b = rng.index(m);
        if (a == b || plan[b] <= 0) continue;
        std::vector<double> ok;
        for (double k : kRatios)
          if (plan[a] >= k * plan[b]) ok.push_back(k);
        if (ok.empty()) continue;
        inst->ratios.push_back({a, b, rng.pick(ok)});
        break;
      }
    }
    if (rng.bernoulli(rate_side)) {
      double weighted = 0;
      for (size_t i = 0; i < m; ++i) weighted += inst->risk[i] * plan[i];
      inst->risk_target = std::round(round_up(weighted / inst->budget + 0.05, 0.1) * 10) / 10;
      const int top = *std::max_element(inst->risk.begin(), inst->risk.end());
      if (inst->risk_target >= top) inst->risk_target = 0;  // would bind nothing
    }
    return inst;
  }
};

}  // namespace

const Family& investment_allocation_family() {
  static const InvestmentFamily family;
  return family;
}

}  // namespace trex::orlib
