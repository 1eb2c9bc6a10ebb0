// Diet and blending problems: choose amounts of foods (or ingredients) at
// minimum cost so that nutrient totals (or blend qualities) stay within bounds.
// Blending themes fix the batch size and write every quality bound as a linear
// ratio constraint, sum_f (q_f - r) x_f >= 0. LP.
//
// Generator: plants a diet (or a blend recipe), measures its nutrient totals
// (or qualities), and sets every lower bound a little below and every upper
// bound a little above them, so the planted plan is feasible by construction.
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

enum class Bounds { lower, upper, both };

struct Attribute {
  std::string name;     // table header and symbol: "protein", "octane number"
  std::string unit;     // table header unit: "g", "%", "" (none)
  std::string content;  // prose with {v}: "{v} g of protein", "an octane number of {v}"
  std::string suffix;   // text right after a number inside `content`: " g", "%", ""
  double lo, hi;        // content range per unit of food / ingredient
  int decimals;
  Bounds bounds;  // which requirements this attribute may carry
};

struct Theme {
  bool blend;
  std::string intro;  // {org} and {batch} are replaced
  std::string item_noun;
  std::vector<std::string> items;
  std::string amount_unit;   // "serving", "kg", "tonne", "barrel"
  std::string amount_units;  // plural
  double cost_lo, cost_hi;
  int cost_decimals;
  std::string product;           // blends: "the feed"; diets: "the daily plan"
  std::string requirement_verb;  // "must provide", "must contain", "must have"
  std::vector<Attribute> attributes;
  double batch_lo, batch_hi, batch_step;  // blends only
  bool table;                             // the theme shows its data as a table more often than not
};

std::vector<Attribute> diet_nutrients() {
  return {
      {"protein", "g", "{v} g of protein", " g", 0, 30, 0, Bounds::lower},
      {"fibre", "g", "{v} g of fibre", " g", 0, 10, 1, Bounds::lower},
      {"calcium", "mg", "{v} mg of calcium", " mg", 0, 350, 0, Bounds::lower},
      {"iron", "mg", "{v} mg of iron", " mg", 0, 6, 1, Bounds::lower},
      {"vitamin C", "mg", "{v} mg of vitamin C", " mg", 0, 90, 0, Bounds::lower},
      {"energy", "kcal", "{v} kcal of energy", " kcal", 50, 450, 0, Bounds::both},
      {"sodium", "mg", "{v} mg of sodium", " mg", 0, 700, 0, Bounds::upper},
      {"fat", "g", "{v} g of fat", " g", 0, 20, 1, Bounds::upper},
  };
}

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {false,
       "A nutritionist at {org} is designing the cheapest daily meal plan that still meets a "
       "patient's nutritional requirements.",
       "food", text::foods(), "serving", "servings", 0.15, 3.5, 2, "the daily plan", "must provide",
       diet_nutrients(), 0, 0, 0, true},
      {false,
       "The quartermaster of a mountain expedition organised by {org} is planning the daily "
       "rations for one climber and wants to keep the cost as low as possible.",
       "ration item",
       {"oatmeal",         "trail mix",     "dried apricots", "beef jerky",      "hard cheese",
        "peanut butter",   "pasta",         "rice",           "dehydrated soup", "dark chocolate",
        "crackers",        "powdered milk", "lentils",        "salami",          "energy bars",
        "instant noodles", "dried mango",   "granola",        "tuna pouches",    "couscous"},
       "serving",
       "servings",
       0.2,
       4,
       2,
       "the daily ration",
       "must provide",
       diet_nutrients(),
       0,
       0,
       0,
       false},
      {true,
       "{org} mixes cattle feed and has an order for a batch of exactly {batch} kg. The feed is "
       "blended from the ingredients below.",
       "ingredient",
       {"wheat", "barley", "soybean meal", "fish meal", "corn gluten", "molasses", "wheat bran",
        "sorghum", "canola meal", "alfalfa", "oat hulls", "sunflower meal", "field peas",
        "rice bran", "maize"},
       "kg",
       "kg",
       0.12,
       0.95,
       2,
       "the feed",
       "must contain",
       {{"protein", "%", "{v}% protein", "%", 2, 60, 1, Bounds::both},
        {"fibre", "%", "{v}% fibre", "%", 1, 35, 1, Bounds::upper},
        {"fat", "%", "{v}% fat", "%", 0.5, 12, 1, Bounds::both},
        {"calcium", "%", "{v}% calcium", "%", 0.05, 4, 2, Bounds::lower}},
       1000,
       5000,
       500,
       true},
      {true,
       "A foundry operated by {org} must melt exactly {batch} tonnes of stainless steel from the "
       "charge materials below.",
       "charge material",
       {"stainless scrap", "carbon steel scrap", "pig iron", "ferrochrome", "ferronickel",
        "nickel scrap", "cast iron scrap", "ferromanganese", "turnings", "bundled sheet",
        "rail scrap", "shredded scrap"},
       "tonne",
       "tonnes",
       150,
       2500,
       0,
       "the melt",
       "must contain",
       {{"carbon", "%", "{v}% carbon", "%", 0.05, 4.5, 2, Bounds::upper},
        {"chromium", "%", "{v}% chromium", "%", 0, 40, 1, Bounds::both},
        {"nickel", "%", "{v}% nickel", "%", 0, 25, 1, Bounds::both},
        {"manganese", "%", "{v}% manganese", "%", 0, 10, 1, Bounds::upper}},
       50,
       300,
       10,
       false},
      {true,
       "{org} produces custom fertiliser blends. A farm cooperative has ordered exactly {batch} "
       "tonnes, to be mixed from the raw materials below.",
       "raw material",
       {"urea", "ammonium nitrate", "ammonium sulfate", "diammonium phosphate",
        "triple superphosphate", "potassium chloride", "potassium sulfate", "bone meal", "compost",
        "rock phosphate", "poultry litter", "gypsum"},
       "tonne",
       "tonnes",
       40,
       700,
       0,
       "the blend",
       "must contain",
       {{"nitrogen", "%", "{v}% nitrogen", "%", 0, 46, 1, Bounds::lower},
        {"phosphate", "%", "{v}% phosphate", "%", 0, 46, 1, Bounds::lower},
        {"potash", "%", "{v}% potash", "%", 0, 60, 1, Bounds::both},
        {"sulfur", "%", "{v}% sulfur", "%", 0, 24, 1, Bounds::upper}},
       20,
       200,
       10,
       true},
      {true,
       "A refinery owned by {org} blends gasoline from several components. Tomorrow's batch must "
       "be exactly {batch} barrels.",
       "component",
       {"alkylate", "reformate", "FCC gasoline", "light naphtha", "isomerate", "butane", "ethanol",
        "straight-run gasoline", "hydrocrackate", "polymer gasoline", "coker naphtha", "MTBE"},
       "barrel",
       "barrels",
       60,
       120,
       2,
       "the gasoline",
       "must have",
       {{"octane number", "", "an octane number of {v}", "", 80, 110, 1, Bounds::lower},
        {"sulfur", "ppm", "{v} ppm sulfur", " ppm", 1, 400, 0, Bounds::upper},
        {"vapour pressure", "kPa", "a vapour pressure of {v} kPa", " kPa", 20, 120, 0,
         Bounds::both},
        {"benzene", "%", "{v}% benzene", "%", 0, 5, 1, Bounds::upper}},
       2000,
       10000,
       500,
       false},
  };
  return t;
}

double round_to(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}
double floor_to(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::floor(v * scale + 1e-9) / scale;
}
double ceil_to(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::ceil(v * scale - 1e-9) / scale;
}

class DietInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> names, keys;  // foods / ingredients
  std::vector<size_t> attrs;             // indices into theme().attributes
  std::vector<std::string> attr_keys;
  std::vector<std::vector<double>> content;  // content[k][f]
  std::vector<double> cost;
  std::vector<double> lower, upper;  // per attribute; < 0 means no bound
  double batch = 0;                  // blends only
  double max_servings = 0;           // diets only: cap on servings of any single food
  struct Limit {
    size_t item;
    double value;
  };
  std::vector<Limit> max_share;     // blends: x_f <= value% of the batch
  std::vector<Limit> availability;  // x_f <= value
  std::vector<Limit> min_use;       // x_f >= value

  bool blend() const { return theme().blend; }
  size_t n() const { return names.size(); }
  size_t m() const { return attrs.size(); }
  const Attribute& attr(size_t k) const { return theme().attributes[attrs[k]]; }

  std::vector<size_t> bounded(const std::vector<double>& bound) const {
    std::vector<size_t> out;
    for (size_t k = 0; k < m(); ++k)
      if (bound[k] >= 0) out.push_back(k);
    return out;
  }

  json size() const override {
    return {{"items", n()},
            {"attributes", m()},
            {"lower_bounds", bounded(lower).size()},
            {"upper_bounds", bounded(upper).size()},
            {"side_constraints", max_share.size() + availability.size() + min_use.size()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {blend() ? "blending" : "diet"};
    if (!max_share.empty()) v.push_back("max_share");
    if (!availability.empty()) v.push_back("availability");
    if (!min_use.empty()) v.push_back("min_use");
    return v;
  }

  // Whether some single food / ingredient alone satisfies every nutrient or quality bound.
  bool single_item_suffices() const {
    for (size_t f = 0; f < n(); ++f) {
      double lo = 0, hi = 1e300;  // feasible amounts of f alone (diets scale; blends don't)
      for (size_t k = 0; k < m(); ++k) {
        const double q = content[k][f];
        if (blend()) {
          if ((lower[k] >= 0 && q < lower[k]) || (upper[k] >= 0 && q > upper[k])) hi = -1;
        } else {
          if (lower[k] >= 0) lo = q > 0 ? std::max(lo, lower[k] / q) : 1e300;
          if (upper[k] >= 0 && q > 0) hi = std::min(hi, upper[k] / q);
        }
      }
      if (!blend()) hi = std::min(hi, max_servings);
      if (lo <= hi) return true;
    }
    return false;
  }

  std::string amount(const text::Style& style, double v) const {
    return style.num(v) + " " + (v == 1 ? theme().amount_unit : theme().amount_units);
  }
  // "12.5% protein", "3 g of fibre", "an octane number of 92": the attribute's
  // content with {v} (and its unit) replaced by `value`.
  std::string content_text(size_t k, const std::string& value) const {
    const Attribute& a = attr(k);
    return replace_all(a.content, "{v}" + a.suffix, value);
  }
  // A value of attribute k with its unit: "12.5%", "12.5 percent", "3 g".
  std::string measure(const text::Style& style, size_t k, double v) const {
    const Attribute& a = attr(k);
    return a.suffix == "%" ? style.percent(v) : style.num(v) + a.suffix;
  }
  std::string requirement(text::Style& style, size_t k) const {
    const std::string at_least = style.pick({"at least ", "no less than "});
    const std::string at_most = style.pick({"at most ", "no more than "});
    std::string v;
    if (lower[k] >= 0 && upper[k] >= 0)
      v = at_least + measure(style, k, lower[k]) + " and " + at_most + measure(style, k, upper[k]);
    else if (lower[k] >= 0)
      v = at_least + measure(style, k, lower[k]);
    else
      v = at_most + measure(style, k, upper[k]);
    return content_text(k, v);
  }
  // Whether the attribute reads as a property ("an octane number of 92") rather
  // than an amount contained ("3 g of fibre").
  bool property(size_t k) const {
    return attr(k).content.starts_with("a ") || attr(k).content.starts_with("an ");
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string item = th.item_noun, items = text::plural(th.item_noun);
    const std::string unit = th.amount_unit;
    text.fact(text::fill(th.intro, {{"{org}", org}, {"{batch}", style.num(batch)}}));
    text.distractors(org, 1, 0.25);
    const std::string count = style.count(static_cast<long>(n()));
    text.fact(text::fill(
        blend()
            ? style.pick(
                  {"There are {n} {items} to choose from; their costs and compositions "
                   "(per {unit}) are:",
                   "The {n} {items} available, with their cost per {unit} and "
                   "composition, are:",
                   "A total of {n} {items} can be used; their costs per {unit} and compositions "
                   "follow."})
            : style.pick(
                  {"There are {n} {items} to choose from; the cost and nutrient content "
                   "of one {unit} of each are:",
                   "The {n} {items} available are listed below, with the cost and "
                   "nutrient content of one {unit} of each.",
                   "A total of {n} {items} can be used. Per {unit}, their costs and nutrient "
                   "contents are as follows."}),
        {{"{n}", count}, {"{items}", items}, {"{unit}", unit}}));
    text.paragraph(false);

    text::Records records;
    records.row_header = text::capitalize(item);
    records.names = names;
    // "one kg of turnings": a singular subject whatever the item's name.
    const std::string subject = style.pick({"one ", "each "}) + unit + " of ";
    for (size_t f = 0; f < n(); ++f) records.row_subjects.push_back(subject + names[f]);
    text::Attribute price;
    price.header = "Cost ($ per " + unit + ")";
    price.label = "costs per " + unit + " in dollars";
    for (size_t f = 0; f < n(); ++f) {
      price.cells.push_back(style.num(cost[f]));
      price.phrases.push_back(style.pick({"costs ", "is priced at ", "has a cost of "}) +
                              style.money(cost[f]));
    }
    records.attributes.push_back(std::move(price));
    for (size_t k = 0; k < m(); ++k) {
      const Attribute& a = attr(k);
      text::Attribute col;
      col.header = text::capitalize(a.name) + (a.unit.empty() ? "" : " (" + a.unit + ")");
      const std::string per = blend() ? "" : " per " + unit;
      col.label = (property(k) ? text::plural(a.name) : a.name + " contents") +
                  (a.unit.empty() ? per : " (" + a.unit + per + ")");
      for (size_t f = 0; f < n(); ++f) {
        const double v = content[k][f];
        col.cells.push_back(style.num(v));
        if (v == 0 && !property(k))
          col.phrases.push_back(style.pick({"has no ", "contains no "}) + a.name);
        else
          col.phrases.push_back((property(k) ? std::string("has ")
                                 : blend()   ? style.pick({"contains ", "has "})
                                             : style.pick({"contains ", "has ", "provides "})) +
                                content_text(k, measure(style, k, v)));
      }
      records.attributes.push_back(std::move(col));
    }
    const text::Layout layout = style.record_layout(th.table);
    text.block(text::render_records(style, layout, records));

    const std::string product = th.product;
    std::vector<std::string> reqs;
    for (size_t k = 0; k < m(); ++k)
      if (lower[k] >= 0 || upper[k] >= 0) reqs.push_back(requirement(style, k));
    const std::string verb =
        style.pick({th.requirement_verb, "has to " + th.requirement_verb.substr(5)});
    text.fact(text::fill(style.pick({"{P} {verb} {list}.", "To be acceptable, {p} {verb} {list}.",
                                     "The requirement is that {p} {verb} {list}."}),
                         {{"{P}", text::capitalize(product)},
                          {"{p}", product},
                          {"{verb}", verb},
                          {"{list}", text::english_list(reqs)}}));
    if (blend())
      text.fact(text::fill(
          style.pick({"Qualities blend in proportion to the amounts used.",
                      "Each quality of {p} is the average of the {items}' values, weighted by the "
                      "amounts used.",
                      "{P}'s qualities are the averages of its {items}' qualities, in proportion "
                      "to the amounts mixed."}),
          {{"{P}", text::capitalize(product)}, {"{p}", product}, {"{items}", items}}));
    else
      text.fact(text::fill(
          style.pick({"For variety, no more than {q} of any single {item} may be included.",
                      "{P} may include at most {q} of each {item}.",
                      "To keep {p} varied, each {item} is limited to {q}."}),
          {{"{P}", text::capitalize(product)},
           {"{p}", product},
           {"{q}", amount(style, max_servings)},
           {"{item}", item}}));
    // Side conditions, if any, are a shuffled paragraph of their own; without them the
    // requirements keep their place at the head of the paragraph.
    const bool sides = !max_share.empty() || !availability.empty() || !min_use.empty();
    if (sides) text.paragraph(false);
    for (const auto& l : max_share)
      text.fact(text::fill(style.pick({"At most {pct} of the batch may be {name}.",
                                       "{Name} may make up no more than {pct} of the batch.",
                                       "The share of {name} in the batch cannot exceed {pct}."}),
                           {{"{pct}", style.percent(l.value)},
                            {"{name}", names[l.item]},
                            {"{Name}", text::capitalize(names[l.item])}}));
    for (const auto& l : availability)
      text.fact(text::fill(
          blend() ? style.pick({"The stock of {name} is limited to {q}.",
                                "At most {q} of {name} can be used, as that is all there is in "
                                "stock.",
                                "The supplier has no more than {q} of {name} in stock."})
                  : style.pick({"{P} may include at most {q} of {name}.",
                                "No more than {q} of {name} may be included.",
                                "The amount of {name} is limited to {q}."}),
          {{"{P}", text::capitalize(product)},
           {"{q}", amount(style, l.value)},
           {"{name}", names[l.item]}}));
    for (const auto& l : min_use)
      text.fact(text::fill(
          blend() ? style.pick({"At least {q} of {name} must be used up, to clear surplus stock.",
                                "Because there is surplus stock of {name}, at least {q} of it "
                                "must go into the batch.",
                                "The batch must use at least {q} of {name} from surplus stock."})
                  : style.pick({"By personal preference, {p} must include at least {q} of {name}.",
                                "{P} has to contain at least {q} of {name}, by personal "
                                "preference.",
                                "At least {q} of {name} must be included, as a matter of taste."}),
          {{"{P}", text::capitalize(product)},
           {"{p}", product},
           {"{q}", amount(style, l.value)},
           {"{name}", names[l.item]}}));
    text.fact(style.pick({"Fractional amounts are allowed.", "Amounts need not be whole numbers.",
                          "Any non-negative amount, fractions included, may be used."}));
    text.distractors(org, 1, 0.2);
    text.paragraph(sides);
    const std::string units = th.amount_units;
    text.fact(text::question(
        style,
        blend() ? style.pick({"how many " + units + " of each " + item + " to blend",
                              "how much of each " + item + " to use in the batch",
                              "the amount of each " + item + " in " + product})
                : style.pick({"how many " + units + " of each " + item + " to include",
                              "how much of each " + item + " " + product + " should contain",
                              "the amount of each " + item + " in " + product}),
        "minimise the total cost",
        style.pick({"the minimum cost in dollars", "the minimum total cost",
                    "the lowest possible cost"})));
    return text.text();
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f(blend() ? "Blending" : "Diet problem");
    const std::string attr_word = blend() ? "quality attributes" : "nutrients";
    f.set("$F = " + latex_set(keys) + "$", th.item_noun + "s");
    f.set("$K = " + latex_set(attr_keys) + "$", attr_word);
    auto lo_set = bounded(lower), hi_set = bounded(upper);
    auto subset_keys = [&](const std::vector<size_t>& idx) {
      std::vector<std::string> out;
      for (size_t k : idx) out.push_back(attr_keys[k]);
      return out;
    };
    auto subset_values = [&](const std::vector<size_t>& idx, const std::vector<double>& v) {
      std::vector<double> out;
      for (size_t k : idx) out.push_back(v[k]);
      return latex_vector(out);
    };
    if (!lo_set.empty())
      f.set("$K^{\\min} = " + latex_set(subset_keys(lo_set)) + " \\subseteq K$",
            attr_word + " with a lower bound");
    if (!hi_set.empty())
      f.set("$K^{\\max} = " + latex_set(subset_keys(hi_set)) + " \\subseteq K$",
            attr_word + " with an upper bound");
    f.parameter("$c_f$", "cost per " + th.amount_unit + " of $f$ (dollars)", latex_vector(cost));
    f.parameter("$q_{k,f}$",
                blend() ? "value of attribute $k$ in $f$"
                        : "amount of nutrient $k$ in one " + th.amount_unit + " of $f$",
                latex_matrix(content));
    if (!lo_set.empty())
      f.parameter("$L_k$", blend() ? "minimum value of $k$ in the blend" : "minimum total of $k$",
                  subset_values(lo_set, lower));
    if (!hi_set.empty())
      f.parameter("$U_k$", blend() ? "maximum value of $k$ in the blend" : "maximum total of $k$",
                  subset_values(hi_set, upper));
    if (blend())
      f.parameter("$B$", "batch size (" + th.amount_units + ")", text::num(batch));
    else
      f.parameter("$S$", "maximum " + th.amount_units + " of any single " + th.item_noun,
                  text::num(max_servings));
    f.variable("$x_f \\ge 0$", th.amount_units + " of $f$ used");
    f.objective("\\min \\sum_{f \\in F} c_f x_f", "Minimise the total cost");
    if (blend()) {
      f.constraint("batch size", "\\sum_{f \\in F} x_f = B");
      if (!lo_set.empty())
        f.constraint(
            "minimum quality (linearised ratio)",
            "\\sum_{f \\in F} (q_{k,f} - L_k) x_f \\ge 0 \\quad \\forall k \\in K^{\\min}");
      if (!hi_set.empty())
        f.constraint(
            "maximum quality (linearised ratio)",
            "\\sum_{f \\in F} (q_{k,f} - U_k) x_f \\le 0 \\quad \\forall k \\in K^{\\max}");
    } else {
      if (!lo_set.empty())
        f.constraint("nutrient minimum",
                     "\\sum_{f \\in F} q_{k,f} x_f \\ge L_k \\quad \\forall k \\in K^{\\min}");
      if (!hi_set.empty())
        f.constraint("nutrient maximum",
                     "\\sum_{f \\in F} q_{k,f} x_f \\le U_k \\quad \\forall k \\in K^{\\max}");
      f.constraint("variety", "x_f \\le S \\quad \\forall f \\in F");
    }
    for (const auto& l : max_share)
      f.constraint("maximum share", "x_{" + latex_name(keys[l.item]) + "} \\le \\frac{" +
                                        text::num(l.value) + "}{100} \\sum_{f \\in F} x_f");
    for (const auto& l : availability)
      f.constraint("availability",
                   "x_{" + latex_name(keys[l.item]) + "} \\le " + text::num(l.value));
    for (const auto& l : min_use)
      f.constraint("minimum use",
                   "x_{" + latex_name(keys[l.item]) + "} \\ge " + text::num(l.value));
    return f.markdown();
  }

  std::string gmpl() const override {
    auto lo_set = bounded(lower), hi_set = bounded(upper);
    std::string model = "set F;\nset K;\nparam c{F} >= 0;\nparam q{K, F};\n";
    if (!lo_set.empty()) model += "set KMIN within K;\nparam L{KMIN};\n";
    if (!hi_set.empty()) model += "set KMAX within K;\nparam U{KMAX};\n";
    model += blend() ? "param B > 0;\n" : "param S > 0;\n";
    model += "var x{F} >= 0;\n";
    model += "minimize TotalCost: sum{f in F} c[f] * x[f];\n";
    if (blend()) {
      model += "s.t. BatchSize: sum{f in F} x[f] = B;\n";
      if (!lo_set.empty())
        model += "s.t. MinQuality{k in KMIN}: sum{f in F} (q[k, f] - L[k]) * x[f] >= 0;\n";
      if (!hi_set.empty())
        model += "s.t. MaxQuality{k in KMAX}: sum{f in F} (q[k, f] - U[k]) * x[f] <= 0;\n";
    } else {
      if (!lo_set.empty())
        model += "s.t. MinNutrient{k in KMIN}: sum{f in F} q[k, f] * x[f] >= L[k];\n";
      if (!hi_set.empty())
        model += "s.t. MaxNutrient{k in KMAX}: sum{f in F} q[k, f] * x[f] <= U[k];\n";
      model += "s.t. Variety{f in F}: x[f] <= S;\n";
    }
    for (size_t i = 0; i < max_share.size(); ++i)
      model += "s.t. MaxShare" + std::to_string(i + 1) + ": x['" + keys[max_share[i].item] +
               "'] <= " + text::num(max_share[i].value) + " / 100 * sum{f in F} x[f];\n";
    for (size_t i = 0; i < availability.size(); ++i)
      model += "s.t. Availability" + std::to_string(i + 1) + ": x['" + keys[availability[i].item] +
               "'] <= " + text::num(availability[i].value) + ";\n";
    for (size_t i = 0; i < min_use.size(); ++i)
      model += "s.t. MinUse" + std::to_string(i + 1) + ": x['" + keys[min_use[i].item] +
               "'] >= " + text::num(min_use[i].value) + ";\n";
    GmplData data;
    data.set("F", keys).set("K", attr_keys).param("c", keys, cost);
    data.param("q", attr_keys, keys, content);
    auto subset = [&](const std::string& set_name, const std::string& param_name,
                      const std::vector<size_t>& idx, const std::vector<double>& bound) {
      std::vector<std::string> k;
      std::vector<double> v;
      for (size_t i : idx) {
        k.push_back(attr_keys[i]);
        v.push_back(bound[i]);
      }
      data.set(set_name, k).param(param_name, k, v);
    };
    if (!lo_set.empty()) subset("KMIN", "L", lo_set, lower);
    if (!hi_set.empty()) subset("KMAX", "U", hi_set, upper);
    if (blend())
      data.param("B", batch);
    else
      data.param("S", max_servings);
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> x(n());
    double objective = 0, total = 0;
    for (size_t f = 0; f < n(); ++f) {
      x[f] = s.value("x", {keys[f]});
      c.ge(x[f], 0, "x[" + keys[f] + "] nonnegative");
      objective += cost[f] * x[f];
      total += x[f];
    }
    if (blend()) c.eq(total, batch, "batch size");
    for (size_t f = 0; f < n() && !blend(); ++f)
      c.le(x[f], max_servings, "variety limit on " + keys[f]);
    for (size_t k = 0; k < m(); ++k) {
      double sum = 0;
      for (size_t f = 0; f < n(); ++f) sum += content[k][f] * x[f];
      // Blends compare sum q x against r * sum x: the same constraint as
      // sum (q - r) x >= 0, with a tolerance scaled by the terms involved.
      if (lower[k] >= 0)
        c.ge(sum, blend() ? lower[k] * total : lower[k], "minimum " + attr_keys[k]);
      if (upper[k] >= 0)
        c.le(sum, blend() ? upper[k] * total : upper[k], "maximum " + attr_keys[k]);
    }
    for (const auto& l : max_share)
      c.le(x[l.item], l.value / 100 * total, "maximum share of " + keys[l.item]);
    for (const auto& l : availability) c.le(x[l.item], l.value, "availability of " + keys[l.item]);
    for (const auto& l : min_use) c.ge(x[l.item], l.value, "minimum use of " + keys[l.item]);
    return c.result(objective);
  }
};

class DietFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "diet"; }
  std::string_view title() const override {
    return "Diet and blending (min cost, nutrient/quality bounds)";
  }
  ProblemClass problem_class() const override { return ProblemClass::lp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<DietInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const bool blend = th.blend;
    const size_t n =
        static_cast<size_t>(blend ? size_for(rng, options.difficulty, {3, 4}, {4, 6}, {6, 9})
                                  : size_for(rng, options.difficulty, {3, 5}, {5, 8}, {8, 12}));
    const size_t m =
        static_cast<size_t>(blend ? size_for(rng, options.difficulty, {2, 2}, {2, 3}, {3, 4})
                                  : size_for(rng, options.difficulty, {2, 3}, {3, 4}, {4, 6}));
    inst->org = rng.pick(text::companies());
    inst->names = text::pick_distinct(rng, th.items, n);
    inst->keys = text::symbols(inst->names);
    // The first attribute drawn can carry a lower bound, so the optimum is never "buy nothing".
    std::vector<size_t> lower_capable;
    for (size_t k = 0; k < th.attributes.size(); ++k)
      if (th.attributes[k].bounds != Bounds::upper) lower_capable.push_back(k);
    inst->attrs.push_back(rng.pick(lower_capable));
    std::vector<size_t> rest;
    for (size_t k = 0; k < th.attributes.size(); ++k)
      if (k != inst->attrs[0]) rest.push_back(k);
    for (size_t i : rng.sample(rest.size(), m - 1)) inst->attrs.push_back(rest[i]);
    std::sort(inst->attrs.begin() + 1, inst->attrs.end());
    for (size_t k = 0; k < m; ++k) inst->attr_keys.push_back(text::symbol(inst->attr(k).name));

    for (size_t f = 0; f < n; ++f)
      inst->cost.push_back(round_to(rng.uniform(th.cost_lo, th.cost_hi), th.cost_decimals));
    // Redraw until no single item meets every requirement on its own: an optimum that
    // buys one food (or blends one input) is too easy.
    std::vector<double> plan(n, 0.0);
    for (int attempt = 0; attempt < 30; ++attempt) {
      inst->content.assign(m, std::vector<double>(n, 0.0));
      for (size_t k = 0; k < m; ++k) {
        const Attribute& a = inst->attr(k);
        for (size_t f = 0; f < n; ++f) {
          // Diets: some foods lack a nutrient entirely; blends: every input has some value.
          if (!blend && a.lo == 0 && rng.bernoulli(0.25)) continue;
          inst->content[k][f] = round_to(rng.uniform(a.lo, a.hi), a.decimals);
        }
      }
      // Planted plan: servings in halves, or a blend recipe over at least two inputs.
      plan.assign(n, 0.0);
      if (blend) {
        inst->batch =
            th.batch_lo +
            th.batch_step *
                rng.uniform_int(
                    0, static_cast<int>(std::round((th.batch_hi - th.batch_lo) / th.batch_step)));
        std::vector<double> w(n, 0.0);
        double sum = 0;
        for (size_t f = 0; f < n; ++f) {
          if (f >= 2 && rng.bernoulli(0.3)) continue;
          w[f] = rng.uniform(0.1, 1.0);
          sum += w[f];
        }
        for (size_t f = 0; f < n; ++f) plan[f] = inst->batch * w[f] / sum;
        rng.shuffle(plan);
      } else {
        size_t active = 0;
        for (size_t f = 0; f < n; ++f) {
          if (rng.bernoulli(0.3) && f + 3 < n + active) continue;
          plan[f] = 0.5 * rng.uniform_int(1, 8);
          ++active;
        }
        const double most = *std::max_element(plan.begin(), plan.end());
        inst->max_servings = std::max(2.0, std::ceil(most)) + rng.uniform_int(0, 1);
      }
      const double total_plan = blend ? inst->batch : 1.0;
      inst->lower.assign(m, -1.0);
      inst->upper.assign(m, -1.0);
      for (size_t k = 0; k < m; ++k) {
        const Attribute& a = inst->attr(k);
        double level = 0;  // diet: nutrient total; blend: quality of the planted mix
        for (size_t f = 0; f < n; ++f) level += inst->content[k][f] * plan[f];
        level /= total_plan;
        const bool want_lower = a.bounds != Bounds::upper;
        bool want_upper =
            a.bounds == Bounds::upper || (a.bounds == Bounds::both && rng.bernoulli(0.4));
        const int dec = blend ? std::max(a.decimals, 1) : a.decimals;
        if (want_lower && level > 0)
          inst->lower[k] = floor_to(level * rng.uniform(0.75, 0.97), dec);
        if (want_upper && level > 0) {
          double hi = ceil_to(level * rng.uniform(1.03, 1.3), dec);
          inst->upper[k] = std::max(hi, std::pow(10.0, -dec));
        }
        if (inst->lower[k] <= 0) inst->lower[k] = -1.0;
      }
      if (inst->lower[0] < 0) {
        // Without a lower bound a diet could buy nothing: the planted plan lacks attribute 0,
        // so make its first item rich in it and require most of that amount.
        const Attribute& a = inst->attr(0);
        size_t f = 0;
        while (plan[f] <= 0) ++f;
        inst->content[0][f] = round_to(std::max(a.hi / 2, 1.0), a.decimals);
        double level = 0;
        for (size_t g = 0; g < n; ++g) level += inst->content[0][g] * plan[g];
        level /= total_plan;
        const int dec = blend ? std::max(a.decimals, 1) : a.decimals;
        inst->lower[0] = floor_to(level * 0.9, dec);
        if (inst->upper[0] >= 0 && inst->upper[0] < level)
          inst->upper[0] = ceil_to(level * 1.1, dec);
      }
      if (!inst->single_item_suffices()) break;
    }
    // Optional side conditions, each satisfied by the plan.
    auto planted_item = [&]() {
      std::vector<size_t> used;
      for (size_t f = 0; f < n; ++f)
        if (plan[f] > 0) used.push_back(f);
      return rng.pick(used);
    };
    if (blend && rng.bernoulli(options.side_constraint_rate)) {
      size_t f = planted_item();
      double pct = std::ceil(100 * plan[f] / inst->batch + rng.uniform(0.0, 8.0));
      if (pct < 100) inst->max_share.push_back({f, pct});
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      size_t f = planted_item();
      double step = blend ? th.batch_step / 10 : 0.5;
      const double limit = std::ceil(plan[f] * rng.uniform(1.0, 1.2) / step) * step;
      if (blend || limit < inst->max_servings) inst->availability.push_back({f, limit});
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      size_t f = planted_item();
      double step = blend ? th.batch_step / 10 : 0.5;
      double v = std::floor(plan[f] * rng.uniform(0.5, 0.95) / step) * step;
      if (v > 0) inst->min_use.push_back({f, v});
    }
    return inst;
  }
};

}  // namespace

const Family& diet_family() {
  static const DietFamily family;
  return family;
}

}  // namespace trex::orlib
