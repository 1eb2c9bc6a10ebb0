// Product mix / production planning: products share limited resources, maximise
// profit, with optional market (max) and contract (min) demand bounds and side
// conditions (a minimum production ratio, a joint cap on two products). LP, or IP
// when the story sells whole units.
//
// Generator: plants a production plan, derives each capacity as the plan's usage
// plus a little slack, and draws every bound and side condition so the plan
// satisfies it. Profits follow hidden resource prices, so several products
// compete for the optimum instead of one dominating.
#include <algorithm>
#include <cmath>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

struct Resource {
  std::string name;  // "carpentry hours"
  std::string unit;  // "hours"
  double step;       // usage per unit is a multiple of this
};

struct Theme {
  std::string intro;  // {org} is replaced by an organisation name
  std::string product_noun;
  std::vector<std::string> products;
  std::string unit;    // production unit, singular ("kg", "tray"; "unit" for countable goods)
  std::string units;   // plural
  bool countable;      // the product itself is the unit: "20 desks" rather than "20 kg of desk"
  bool integer;        // whole units only (IP)
  bool price_cost;     // profit is given as price minus unit cost
  bool table;          // the theme shows its data as a table more often than not
  std::string period;  // "this week"
  std::vector<Resource> resources;  // pool, at least 5
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} runs a small furniture workshop and must plan {period}'s production.",
       "furniture model",
       {"dining chair", "bar stool", "coffee table", "bookcase", "desk", "nightstand", "dresser",
        "bench", "rocking chair", "wardrobe", "side table", "cabinet"},
       "unit",
       "units",
       true,
       true,
       false,
       true,
       "this week",
       {{"carpentry labour", "hours", 0.5},
        {"finishing labour", "hours", 0.5},
        {"oak timber", "board feet", 1},
        {"upholstery labour", "hours", 0.25},
        {"packaging labour", "hours", 0.25}}},
      {"The cosmetics laboratory of {org} blends several creams in bulk and must decide how "
       "many kilograms of each to make {period}.",
       "cream",
       {"day cream", "night cream", "hand lotion", "sun cream", "eye gel", "foot balm",
        "body butter", "face mask", "lip balm", "after-sun gel", "cleansing milk", "serum"},
       "kg",
       "kg",
       false,
       false,
       true,
       false,
       "this month",
       {{"mixing vessel time", "hours", 0.05},
        {"shea butter", "kg", 0.05},
        {"essential oils", "litres", 0.01},
        {"filling line time", "hours", 0.05},
        {"quality lab time", "hours", 0.02}}},
      {"{org} assembles consumer electronics and is planning {period}'s output.",
       "device",
       {"router", "smart speaker", "tablet", "e-reader", "monitor", "webcam", "game controller",
        "smartwatch", "drone", "dashcam", "headset", "projector"},
       "unit",
       "units",
       true,
       true,
       true,
       true,
       "next week",
       {{"SMT line time", "minutes", 1},
        {"assembly time", "minutes", 2},
        {"test bench time", "minutes", 1},
        {"solder paste", "grams", 1},
        {"packing time", "minutes", 1}}},
      {"{org} operates a craft brewery and has to decide how many hectolitres of each beer to "
       "brew {period}.",
       "beer",
       {"pale ale", "lager", "stout", "porter", "wheat beer", "IPA", "pilsner", "amber ale",
        "saison", "bock", "sour ale", "red ale"},
       "hectolitre",
       "hectolitres",
       false,
       false,
       false,
       false,
       "this month",
       {{"malt", "kg", 0.5},
        {"hops", "kg", 0.1},
        {"brewhouse time", "hours", 0.1},
        {"fermentation tank capacity", "tank-days", 0.5},
        {"bottling line time", "hours", 0.1}}},
      {"{org} bakes for local cafes and must plan {period}'s production of trays.",
       "product",
       {"croissants", "baguettes", "muffins", "bagels", "cinnamon rolls", "scones", "brioche",
        "pretzels", "focaccia", "cookies", "danishes", "rye loaves"},
       "tray",
       "trays",
       false,
       true,
       true,
       true,
       "tomorrow",
       {{"oven time", "minutes", 2},
        {"mixer time", "minutes", 1},
        {"flour", "kg", 0.5},
        {"baker labour", "minutes", 2},
        {"butter", "kg", 0.25}}},
      {"A garment factory run by {org} is planning {period}'s sewing schedule.",
       "garment",
       {"shirt", "blouse", "jacket", "skirt", "pair of trousers", "dress", "hoodie", "vest", "coat",
        "polo shirt", "pair of shorts", "sweater"},
       "piece",
       "pieces",
       true,
       true,
       true,
       false,
       "next week",
       {{"cutting time", "minutes", 1},
        {"sewing time", "minutes", 2},
        {"fabric", "metres", 0.25},
        {"pressing time", "minutes", 1},
        {"embroidery machine time", "minutes", 1}}},
  };
  return t;
}

double round2(double v) {
  return std::round(v * 100.0) / 100.0;
}

// English plural of a product name: "bench" -> "benches", "pair of shorts" -> "pairs of shorts".
std::string plural(const std::string& name) {
  if (starts_with(name, "pair of ")) return "pairs" + name.substr(4);
  auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends("s") || ends("sh") || ends("ch") || ends("x")) return name + "es";
  return name + "s";
}

// A unit after a number: "1 hour", "1 board foot", "2 hours".
std::string unit_after(double v, const std::string& unit) {
  if (v != 1) return unit;
  if (unit == "board feet") return "board foot";
  if (unit.size() > 1 && unit.back() == 's') return unit.substr(0, unit.size() - 1);
  return unit;
}

// Product names used as MathProg symbols drop the "pair of" wording.
std::string product_key(const std::string& name) {
  std::string s = starts_with(name, "pair of ") ? name.substr(8) : name;
  return text::symbol(s);
}

class ProductMixInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> names, keys;  // products
  std::vector<size_t> res;               // indices into theme().resources
  std::vector<std::string> res_keys;
  std::vector<std::vector<double>> usage;   // usage[r][p]
  std::vector<double> capacity;             // per resource
  std::vector<double> profit, price, cost;  // per product (price/cost only when price_cost)
  std::vector<double> min_qty, max_qty;     // per product; < 0 means no bound
  struct Ratio {
    size_t a, b;
    double k;  // x_a >= k x_b
  };
  struct JointCap {
    size_t a, b;
    double limit;  // x_a + x_b <= limit
  };
  std::vector<Ratio> ratios;
  std::vector<JointCap> joint_caps;

  size_t n() const { return names.size(); }
  size_t m() const { return res.size(); }
  const Resource& resource(size_t r) const { return theme().resources[res[r]]; }
  double unit_profit(size_t p) const { return theme().price_cost ? price[p] - cost[p] : profit[p]; }

  std::vector<size_t> bounded(const std::vector<double>& bound) const {
    std::vector<size_t> out;
    for (size_t p = 0; p < n(); ++p)
      if (bound[p] >= 0) out.push_back(p);
    return out;
  }

  json size() const override {
    return {{"products", n()},
            {"resources", m()},
            {"min_bounds", bounded(min_qty).size()},
            {"max_bounds", bounded(max_qty).size()},
            {"side_constraints", ratios.size() + joint_caps.size()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (theme().integer) v.push_back("integer_units");
    if (theme().price_cost) v.push_back("price_minus_cost");
    if (!ratios.empty()) v.push_back("production_ratio");
    if (!joint_caps.empty()) v.push_back("joint_cap");
    return v;
  }

  std::string qty(const text::Style& style, double v) const {
    const Theme& th = theme();
    return style.num(v) + " " + (v == 1 ? th.unit : th.units);
  }
  // "20 desks", "1 desk" for countable goods; "20 kg of day cream" otherwise.
  std::string qty_of(const text::Style& style, double v, size_t p) const {
    if (theme().countable) return style.num(v) + " " + (v == 1 ? names[p] : plural(names[p]));
    return qty(style, v) + " of " + names[p];
  }

  // "number of desks" / "amount of day cream"
  std::string amount_of(size_t p) const {
    return theme().countable ? "number of " + plural(names[p]) : "amount of " + names[p];
  }

  std::string usage_phrase(size_t p) const {
    std::vector<std::string> parts;
    for (size_t r = 0; r < m(); ++r)
      if (usage[r][p] > 0)
        parts.push_back(text::num(usage[r][p]) + " " + unit_after(usage[r][p], resource(r).unit) +
                        " of " + resource(r).name);
    return text::english_list(parts);
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string per = "per " + th.unit;
    const std::string nouns = text::plural(th.product_noun);
    text.fact(text::fill(th.intro, {{"{org}", org}, {"{period}", th.period}}));
    text.fact(
        text::fill(style.pick({"Its range consists of {n} {nouns}: {list}.",
                               "It makes {n} {nouns}: {list}.", "The {nouns} on offer are {list}.",
                               "There are {n} {nouns} to consider ({list})."}),
                   {{"{n}", style.count(static_cast<long>(n()))},
                    {"{nouns}", nouns},
                    {"{list}", text::english_list(names)}}));
    std::vector<std::string> res_list;
    for (size_t r = 0; r < m(); ++r) res_list.push_back(resource(r).name);
    text.fact(text::fill(
        style.pick({"Production is limited by {list}.", "The limited resources are {list}.",
                    "Every {noun} draws on {list}, all in limited supply.",
                    "Output is constrained by the available {list}."}),
        {{"{list}", text::english_list(res_list)}, {"{noun}", th.product_noun}}));
    text.distractors(org, 1, 0.25);
    text.paragraph(false);

    text::Records records;
    records.row_header = text::capitalize(th.product_noun);
    records.names = names;
    for (size_t p = 0; p < n(); ++p)
      records.row_subjects.push_back(th.countable ? "each " + names[p]
                                                  : "each " + th.unit + " of " + names[p]);
    for (size_t r = 0; r < m(); ++r) {
      const Resource& res = resource(r);
      text::Attribute a;
      a.header = text::capitalize(res.name) + " (" + res.unit + " " + per + ")";
      a.label = res.unit + " of " + res.name + " " + per;
      for (size_t p = 0; p < n(); ++p) {
        a.cells.push_back(style.num(usage[r][p]));
        a.phrases.push_back(usage[r][p] > 0
                                ? style.pick({"uses ", "needs ", "requires ", "takes "}) +
                                      style.num(usage[r][p]) + " " +
                                      unit_after(usage[r][p], res.unit) + " of " + res.name
                                : "needs no " + res.name);
      }
      records.attributes.push_back(std::move(a));
    }
    auto money_column = [&](const std::string& header, const std::string& label,
                            const std::vector<double>& values,
                            std::initializer_list<const char*> phrase_forms) {
      text::Attribute a;
      a.header = header + " ($ " + per + ")";
      a.label = label + " " + per + " in dollars";
      for (size_t p = 0; p < n(); ++p) {
        a.cells.push_back(style.num(values[p]));
        a.phrases.push_back(
            text::fill(style.pick(phrase_forms), {{"{v}", style.money(values[p])}}));
      }
      records.attributes.push_back(std::move(a));
    };
    if (th.price_cost) {
      money_column("Price", "selling price", price,
                   {"sells for {v}", "is sold at {v}", "fetches {v} on the market"});
      money_column(
          "Unit cost", "production cost", cost,
          {"costs {v} to make", "has a production cost of {v}", "incurs {v} of production cost"});
    } else {
      money_column("Profit", "profit", profit,
                   {"brings a profit of {v}", "earns {v} of profit", "yields a profit of {v}",
                    "contributes {v} to profit"});
    }
    const text::Layout layout = style.record_layout(th.table);
    text.block(text::render_records(style, layout, records));

    std::vector<std::string> caps;
    for (size_t r = 0; r < m(); ++r)
      caps.push_back(style.num(capacity[r]) + " " + unit_after(capacity[r], resource(r).unit) +
                     " of " + resource(r).name);
    text.fact(text::fill(
        style.pick({"Available {period}: {list}.", "{Period} there are {list} available.",
                    "The supply {period} is limited to {list}.",
                    "At most {list} can be used {period}."}),
        {{"{period}", th.period},
         {"{Period}", text::capitalize(th.period) + ","},
         {"{list}", text::english_list(caps)}}));
    text.paragraph(false);
    for (size_t p : bounded(max_qty))
      text.fact(text::fill(
          style.pick({"The market can absorb at most {q}.", "No more than {q} can be sold.",
                      "Demand is capped at {q}.", "At most {q} can be sold."}),
          {{"{q}", qty_of(style, max_qty[p], p)}}));
    for (size_t p : bounded(min_qty))
      text.fact(text::fill(style.pick({"A customer contract requires at least {q}.",
                                       "At least {q} must be made to honour a contract.",
                                       "A standing order calls for a minimum of {q}."}),
                           {{"{q}", qty_of(style, min_qty[p], p)}}));
    for (const auto& q : ratios)
      text.fact(text::fill(
          style.pick({"To keep the range balanced, the {a} produced must be at least {k} times "
                      "the {b}.",
                      "The {a} must be no less than {k} times the {b}.",
                      "For every unit of {bn} made, at least {k} of {an} must be made too."}),
          {{"{a}", amount_of(q.a)},
           {"{b}", amount_of(q.b)},
           {"{k}", style.num(q.k)},
           {"{an}", names[q.a]},
           {"{bn}", names[q.b]}}));
    for (const auto& j : joint_caps)
      text.fact(text::fill(
          style.pick({"Because {a} and {b} share one marketing campaign, at most {q} of the two "
                      "together can be sold.",
                      "Together, {a} and {b} may not exceed {q}.",
                      "The combined output of {a} and {b} is limited to {q}."}),
          {{"{a}", names[j.a]}, {"{b}", names[j.b]}, {"{q}", qty(style, j.limit)}}));
    if (th.integer)
      text.fact(style.pick({"Only whole " + th.units + " can be produced.",
                            "Quantities must be whole numbers of " + th.units + ".",
                            "Production happens in whole " + th.units + " only."}));
    else
      text.fact(
          style.pick({"Fractional quantities are allowed.", "Quantities need not be whole numbers.",
                      "Any non-negative amount, fractions included, can be made."}));
    text.distractors(org, 1, 0.2);
    text.paragraph();
    const std::string profit_word =
        th.price_cost ? "profit (revenue minus production cost)" : "profit";
    // Drawn in statement order: argument evaluation order differs between compilers.
    const std::string task =
        style.pick({"how much of each " + th.product_noun + " to make",
                    "the production quantity of each " + th.product_noun,
                    "how many " + th.units + " of each " + th.product_noun + " to produce"});
    const std::string value = style.pick(
        {"the maximum profit in dollars", "the maximum total profit", "the optimal profit"});
    text.fact(text::question(style, task, "maximise the total " + profit_word, value));
    return text.text();
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f("Product mix");
    f.set("$P = " + latex_set(keys) + "$", th.product_noun + "s");
    f.set("$R = " + latex_set(res_keys) + "$", "limited resources");
    f.parameter("$a_{r,p}$", "amount of resource $r$ used per " + th.unit + " of $p$",
                latex_matrix(usage));
    f.parameter("$C_r$", "amount of resource $r$ available", latex_vector(capacity));
    if (th.price_cost) {
      f.parameter("$s_p$", "selling price per " + th.unit + " of $p$ (dollars)",
                  latex_vector(price));
      f.parameter("$c_p$", "production cost per " + th.unit + " of $p$ (dollars)",
                  latex_vector(cost));
    } else {
      f.parameter("$\\pi_p$", "profit per " + th.unit + " of $p$ (dollars)", latex_vector(profit));
    }
    auto bound_values = [&](const std::vector<double>& bound) {
      std::vector<std::string> parts;
      for (size_t p : bounded(bound))
        parts.push_back(latex_name(keys[p]) + ": " + text::num(bound[p]));
      std::string out = "(";  // built stepwise: GCC 12 warns (-Wrestrict) on "(" + string
      out += join(parts, ", ");
      return out + ")";
    };
    auto min_set = bounded(min_qty), max_set = bounded(max_qty);
    if (!min_set.empty()) {
      std::vector<std::string> k;
      for (size_t p : min_set) k.push_back(keys[p]);
      f.set("$P^{\\min} = " + latex_set(k) + " \\subseteq P$", "products with a contract minimum");
      f.parameter("$L_p$", "contract minimum for $p \\in P^{\\min}$", bound_values(min_qty));
    }
    if (!max_set.empty()) {
      std::vector<std::string> k;
      for (size_t p : max_set) k.push_back(keys[p]);
      f.set("$P^{\\max} = " + latex_set(k) + " \\subseteq P$", "products with a market limit");
      f.parameter("$U_p$", "market limit for $p \\in P^{\\max}$", bound_values(max_qty));
    }
    f.variable(th.integer ? "$x_p \\in \\mathbb{Z}_{\\ge 0}$" : "$x_p \\ge 0$",
               th.units + " of $p$ produced");
    f.objective(th.price_cost ? "\\max \\sum_{p \\in P} (s_p - c_p) x_p"
                              : "\\max \\sum_{p \\in P} \\pi_p x_p",
                "Maximise the total profit");
    f.constraint("capacity", "\\sum_{p \\in P} a_{r,p} x_p \\le C_r \\quad \\forall r \\in R");
    if (!min_set.empty())
      f.constraint("contract minimum", "x_p \\ge L_p \\quad \\forall p \\in P^{\\min}");
    if (!max_set.empty())
      f.constraint("market limit", "x_p \\le U_p \\quad \\forall p \\in P^{\\max}");
    for (const auto& q : ratios)
      f.constraint("production ratio", "x_{" + latex_name(keys[q.a]) + "} \\ge " + text::num(q.k) +
                                           " x_{" + latex_name(keys[q.b]) + "}");
    for (const auto& j : joint_caps)
      f.constraint("joint marketing cap", "x_{" + latex_name(keys[j.a]) + "} + x_{" +
                                              latex_name(keys[j.b]) + "} \\le " +
                                              text::num(j.limit));
    return f.markdown();
  }

  std::string gmpl() const override {
    const Theme& th = theme();
    auto min_set = bounded(min_qty), max_set = bounded(max_qty);
    std::string model = "set P;\nset R;\nparam a{R, P} >= 0;\nparam C{R} >= 0;\n";
    model += th.price_cost ? "param price{P};\nparam cost{P};\n" : "param profit{P};\n";
    if (!min_set.empty()) model += "set PMIN within P;\nparam L{PMIN} >= 0;\n";
    if (!max_set.empty()) model += "set PMAX within P;\nparam U{PMAX} >= 0;\n";
    model += std::string("var x{P} >= 0") + (th.integer ? " integer" : "") + ";\n";
    model += th.price_cost ? "maximize Profit: sum{p in P} (price[p] - cost[p]) * x[p];\n"
                           : "maximize Profit: sum{p in P} profit[p] * x[p];\n";
    model += "s.t. Capacity{r in R}: sum{p in P} a[r, p] * x[p] <= C[r];\n";
    if (!min_set.empty()) model += "s.t. ContractMin{p in PMIN}: x[p] >= L[p];\n";
    if (!max_set.empty()) model += "s.t. MarketMax{p in PMAX}: x[p] <= U[p];\n";
    for (size_t k = 0; k < ratios.size(); ++k)
      model += "s.t. Ratio" + std::to_string(k + 1) + ": x['" + keys[ratios[k].a] +
               "'] >= " + text::num(ratios[k].k) + " * x['" + keys[ratios[k].b] + "'];\n";
    for (size_t k = 0; k < joint_caps.size(); ++k)
      model += "s.t. JointCap" + std::to_string(k + 1) + ": x['" + keys[joint_caps[k].a] +
               "'] + x['" + keys[joint_caps[k].b] + "'] <= " + text::num(joint_caps[k].limit) +
               ";\n";
    GmplData data;
    data.set("P", keys).set("R", res_keys);
    data.param("a", res_keys, keys, usage).param("C", res_keys, capacity);
    if (th.price_cost)
      data.param("price", keys, price).param("cost", keys, cost);
    else
      data.param("profit", keys, profit);
    auto subset = [&](const std::string& set_name, const std::string& param_name,
                      const std::vector<size_t>& idx, const std::vector<double>& bound) {
      std::vector<std::string> k;
      std::vector<double> v;
      for (size_t p : idx) {
        k.push_back(keys[p]);
        v.push_back(bound[p]);
      }
      data.set(set_name, k).param(param_name, k, v);
    };
    if (!min_set.empty()) subset("PMIN", "L", min_set, min_qty);
    if (!max_set.empty()) subset("PMAX", "U", max_set, max_qty);
    return compose_gmpl(model, "Profit", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> x(n());
    double objective = 0;
    for (size_t p = 0; p < n(); ++p) {
      x[p] = s.value("x", {keys[p]});
      c.ge(x[p], 0, "x[" + keys[p] + "] nonnegative");
      if (theme().integer) c.integral(x[p], "x[" + keys[p] + "]");
      objective += unit_profit(p) * x[p];
    }
    for (size_t r = 0; r < m(); ++r) {
      double used = 0;
      for (size_t p = 0; p < n(); ++p) used += usage[r][p] * x[p];
      c.le(used, capacity[r], "capacity of " + res_keys[r]);
    }
    for (size_t p : bounded(min_qty)) c.ge(x[p], min_qty[p], "contract minimum " + keys[p]);
    for (size_t p : bounded(max_qty)) c.le(x[p], max_qty[p], "market limit " + keys[p]);
    for (const auto& q : ratios) c.ge(x[q.a], q.k * x[q.b], "ratio " + keys[q.a] + "/" + keys[q.b]);
    for (const auto& j : joint_caps)
      c.le(x[j.a] + x[j.b], j.limit, "joint cap " + keys[j.a] + "+" + keys[j.b]);
    return c.result(objective);
  }
};

class ProductMixFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "product_mix"; }
  std::string_view title() const override {
    return "Product mix (resource capacities, demand bounds, ratio and joint caps)";
  }
  ProblemClass problem_class() const override { return ProblemClass::lp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<ProductMixInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const size_t n = static_cast<size_t>(size_for(rng, options.difficulty, {2, 3}, {3, 5}, {6, 9}));
    const size_t m = static_cast<size_t>(size_for(rng, options.difficulty, {2, 2}, {2, 3}, {3, 5}));
    inst->org = rng.pick(text::companies());
    inst->names = text::pick_distinct(rng, th.products, n);
    for (const auto& nm : inst->names) inst->keys.push_back(product_key(nm));
    inst->res = rng.sample(th.resources.size(), m);
    std::sort(inst->res.begin(), inst->res.end());
    for (size_t r = 0; r < m; ++r) inst->res_keys.push_back(text::symbol(inst->resource(r).name));

    // Usage: a multiple of the resource's step; every product needs some resource.
    inst->usage.assign(m, std::vector<double>(n, 0.0));
    for (size_t p = 0; p < n; ++p) {
      bool any = false;
      for (size_t r = 0; r < m; ++r) {
        if (rng.bernoulli(0.15)) continue;
        inst->usage[r][p] = round2(rng.uniform_int(1, 12) * inst->resource(r).step);
        any = true;
      }
      if (!any) {
        size_t r = rng.index(m);
        inst->usage[r][p] = round2(rng.uniform_int(1, 12) * inst->resource(r).step);
      }
    }
    // Hidden resource prices: profit ~ value of the resources a product uses.
    std::vector<double> shadow(m);
    for (size_t r = 0; r < m; ++r) shadow[r] = rng.uniform(2.0, 10.0) / inst->resource(r).step / 6;
    for (size_t p = 0; p < n; ++p) {
      double v = 0;
      for (size_t r = 0; r < m; ++r) v += inst->usage[r][p] * shadow[r];
      double margin =
          std::max(2.0, std::round(v * rng.uniform(0.7, 1.4) * 4 + rng.uniform_int(1, 6)));
      if (th.price_cost) {
        double unit_cost = std::round(rng.uniform(0.4, 1.5) * margin * 4) / 4;  // quarters
        inst->cost.push_back(unit_cost);
        inst->price.push_back(unit_cost + margin);
      } else {
        inst->profit.push_back(margin);
      }
    }
    // Planted plan: at least two products in production.
    std::vector<double> plan(n, 0.0);
    size_t active = 0;
    for (size_t p = 0; p < n; ++p) {
      if (rng.bernoulli(0.25) && p + 2 < n + active) continue;
      plan[p] = rng.uniform_int(5, 60);
      ++active;
    }
    for (size_t r = 0; r < m; ++r) {
      double used = 0;
      for (size_t p = 0; p < n; ++p) used += inst->usage[r][p] * plan[p];
      inst->capacity.push_back(std::max(1.0, std::ceil(used * rng.uniform(1.0, 1.2))));
    }
    // Demand bounds around the plan.
    const double bound_rate = options.difficulty == Difficulty::easy ? 0.2 : 0.35;
    inst->min_qty.assign(n, -1.0);
    inst->max_qty.assign(n, -1.0);
    for (size_t p = 0; p < n; ++p) {
      if (rng.bernoulli(bound_rate))
        inst->max_qty[p] = std::ceil(plan[p] * rng.uniform(1.0, 1.3)) + rng.uniform_int(1, 5);
      if (plan[p] > 0 && rng.bernoulli(bound_rate * 0.6))
        inst->min_qty[p] = std::max(1.0, std::floor(plan[p] * rng.uniform(0.3, 0.9)));
    }
    // Optional side conditions, each satisfied by the plan.
    if (rng.bernoulli(options.side_constraint_rate)) {
      static const double kRatios[] = {0.25, 0.5, 0.75, 1, 1.5, 2};
      for (int attempt = 0; attempt < 20; ++attempt) {
        size_t a = rng.index(n), b = rng.index(n);
        if (a == b || plan[b] <= 0) continue;
        std::vector<double> ok;
        for (double k : kRatios)
          if (plan[a] >= k * plan[b]) ok.push_back(k);
        if (ok.empty()) continue;
        inst->ratios.push_back({a, b, rng.pick(ok)});
        break;
      }
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      size_t a = rng.index(n), b = rng.index(n - 1);
      if (b >= a) ++b;
      double limit =
          std::ceil((plan[a] + plan[b]) * rng.uniform(1.0, 1.15)) + rng.uniform_int(1, 4);
      inst->joint_caps.push_back({a, b, limit});
    }
    return inst;
  }
};

}  // namespace

const Family& product_mix_family() {
  static const ProductMixFamily family;
  return family;
}

}  // namespace trex::orlib
