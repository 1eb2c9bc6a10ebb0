// Multi-dimensional 0/1 knapsack with optional logical side constraints
// (mutual exclusion, if-then dependency). IP.
//
// Generator: plants a random subset S, sets each capacity between S's usage and
// the total weight, so S is feasible and "take everything" is not.
#include <algorithm>
#include <cmath>

#include "trex/core/strings.hpp"
#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/draws.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

struct Resource {
  std::string name;   // "weight"; its symbol names the dimension in the model
  std::string unit;   // "kg"
  std::string label;  // a column of values: "weights in kg"
  // How an item uses it, with {v} the amount and unit ("weighs 3 kg"); the
  // subject is the theme's `subject`, always singular.
  std::vector<std::string> phrases;
};

struct Theme {
  std::string intro;       // story opening; {org} is replaced by an organisation name
  std::string item_noun;   // "item", "project", ...
  std::string item_nouns;  // plural: "pieces of gear"
  std::vector<std::string> item_names;
  std::string value_name;   // "usefulness", "net present value"
  std::string value_unit;   // "points", "thousand dollars"
  std::string value_label;  // a column of values: "usefulness scores in points"
  std::string value_desc;   // what each item has: "a usefulness score (in points)"
  std::string objective;    // what is maximised: "total usefulness"
  // How an item is worth its value: {v} the value with its unit, {n} the bare number.
  std::vector<std::string> value_phrases;
  std::string subject;    // a clause subject for one item, singular: "packing the {name}"
  std::string reference;  // an item in a side condition: "the {name}", "the {name} project"
  std::vector<Resource> resources;  // up to 3
  bool table;                       // the theme shows its data as a table more often than not
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"A hiking club is preparing one member's backpack for a long trek.",
       "piece of gear",
       "pieces of gear",
       {"tent",          "stove",        "water filter", "first-aid kit", "headlamp",
        "rain jacket",   "sleeping bag", "camera",       "map set",       "trekking poles",
        "solar charger", "binoculars",   "rope",         "fleece",        "snacks",
        "cooking pot",   "compass",      "sunscreen",    "gaiters",       "book",
        "knife",         "towel",        "pillow",       "radio",         "sandals",
        "hat",           "gloves",       "tripod",       "hammock",       "mosquito net"},
       "usefulness",
       "points",
       "usefulness scores in points",
       "a usefulness score (in points)",
       "total usefulness",
       {"is worth {v} of usefulness", "scores {v} for usefulness", "brings {n} usefulness points"},
       "packing the {name}",
       "the {name}",
       {{"weight", "kg", "weights in kg", {"adds {v} of weight", "adds {v} to the load"}},
        {"volume", "litres", "volumes in litres", {"takes up {v} of space", "fills {v} of volume"}},
        {"cost", "dollars", "costs in dollars", {"costs {v}", "adds {v} to the cost"}}},
       false},
      {"{org} is choosing which capital projects to fund next year.",
       "project",
       "projects",
       text::projects(),
       "net present value",
       "thousand dollars",
       "net present values in thousand dollars",
       "a net present value (in thousand dollars)",
       "total net present value",
       {"has a net present value of {v}", "is worth {v} in net present value",
        "returns a net present value of {v}"},
       "the {name} project",
       "the {name} project",
       {{"budget", "thousand dollars", "budget needs in thousand dollars", {}},
        {"engineering effort", "person-months", "engineering efforts in person-months", {}},
        {"management attention", "review hours", "management attention needs in review hours", {}}},
       true},
      {"A cargo airline must decide which consignments to load on tonight's flight for {org}.",
       "consignment",
       "consignments",
       {},
       "profit",
       "dollars",
       "profits in dollars",
       "a profit (in dollars)",
       "total profit",
       {"earns a profit of {v}", "is worth {v} of profit", "brings in a profit of {v}"},
       "the {name}",
       "the {name}",
       {{"weight", "tonnes", "weights in tonnes", {"weighs {v}", "has a weight of {v}"}},
        {"volume",
         "cubic metres",
         "volumes in cubic metres",
         {"takes up {v}", "has a volume of {v}"}},
        {"floor space",
         "square metres",
         "floor space needs in square metres",
         {"needs {v} of floor space", "occupies {v} of floor space"}}},
       true},
      {"The marketing team of {org} can run a subset of the following campaigns this quarter.",
       "campaign",
       "campaigns",
       {"TV spot",        "radio ad",        "podcast sponsorship",
        "billboard",      "email blast",     "search ads",
        "social video",   "influencer deal", "trade show",
        "webinar",        "print ad",        "loyalty offer",
        "referral bonus", "flash sale",      "sports sponsorship",
        "cinema ad",      "bus wrap",        "street team",
        "newsletter",     "catalogue",       "pop-up store",
        "charity run",    "app banner",      "coupon mailer",
        "case study",     "product demo",    "quiz contest",
        "radio jingle",   "blog series",     "student promo"},
       "expected new customers",
       "customers",
       "expected numbers of new customers",
       "an expected number of new customers",
       "total number of expected new customers",
       {"is expected to bring {n} new customers", "should win {n} new customers",
        "is expected to attract {n} new customers"},
       "running the {name}",
       "the {name}",
       {{"budget", "dollars", "budgets in dollars", {"costs {v}", "needs a budget of {v}"}},
        {"staff time",
         "hours",
         "staff time needs in hours",
         {"takes {v} of staff time", "needs {v} of staff time"}},
        {"design time",
         "hours",
         "design time needs in hours",
         {"takes {v} of design time", "needs {v} of design work"}}},
       false},
      {"A research satellite operated for {org} has room for only some of the proposed "
       "experiments.",
       "experiment",
       "experiments",
       {"spectrometer",        "magnetometer",     "dust counter",     "ion probe",
        "star tracker test",   "plant growth",     "crystal growth",   "radiation badge",
        "laser link",          "gravity probe",    "ozone sensor",     "thermal camera",
        "cosmic ray detector", "antenna test",     "battery test",     "micro-thruster",
        "solar cell test",     "bacteria culture", "fluid mixing",     "gyro test",
        "sail deployment",     "x-ray imager",     "lightning sensor", "radar altimeter",
        "GPS receiver",        "clock test",       "camera array",     "memory test",
        "coating test",        "ice detector"},
       "science value",
       "points",
       "science values in points",
       "a science value (in points)",
       "total science value",
       {"has a science value of {v}", "is worth {v} of science value", "scores {n} science points"},
       "the {name}",
       "the {name}",
       {{"power", "watts", "power draws in watts", {"draws {v}", "needs {v} of power"}},
        {"mass", "kg", "masses in kg", {"has a mass of {v}", "adds {v} of mass"}},
        {"data volume",
         "MB per day",
         "data volumes in MB per day",
         {"produces {v} of data", "needs a downlink of {v}"}}},
       false},
  };
  return t;
}

// "3 kg", "$40" for dollar amounts; a unit in the plural except after 1.
std::string amount(const text::Style& style, double v, const std::string& unit) {
  if (unit == "dollars") return style.money(v);
  std::string u = unit;
  if (v == 1 && unit.ends_with("s") && !unit.starts_with("thousand")) u.pop_back();
  return style.num(v) + " " + u;
}

// Table header of a quantity: "Weight (kg)", "Budget ($)", "Expected new customers".
std::string header(const std::string& name, const std::string& unit) {
  if (name.ends_with(unit)) return text::capitalize(name);
  return text::capitalize(name) + " (" + (unit == "dollars" ? "$" : unit) + ")";
}

class KnapsackInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> names;              // display names
  std::vector<std::string> keys;               // MathProg symbols
  std::vector<double> value;                   // v_i
  std::vector<std::vector<double>> weight;     // w_{d,i}
  std::vector<double> capacity;                // W_d
  std::vector<std::pair<int, int>> exclusive;  // not both
  std::vector<std::pair<int, int>> implies;    // first chosen => second chosen

  size_t n() const { return value.size(); }
  size_t dims() const { return capacity.size(); }

  json size() const override {
    return {{"items", n()},
            {"dimensions", dims()},
            {"side_constraints", exclusive.size() + implies.size()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (!exclusive.empty()) v.push_back("mutual_exclusion");
    if (!implies.empty()) v.push_back("if_then");
    return v;
  }

  std::string res_name(size_t d) const { return theme().resources[d].name; }
  std::string res_unit(size_t d) const { return theme().resources[d].unit; }

  std::string ref(size_t i) const { return text::fill(theme().reference, {{"{name}", names[i]}}); }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    text.fact(replace_all(th.intro, "{org}", org));
    text.fact(
        text::fill(style.pick({"There are {n} candidate {items}.",
                               "In all, {n} {items} are under consideration.",
                               "The candidates are {n} {items}."}),
                   {{"{n}", style.count(static_cast<long>(n()))}, {"{items}", th.item_nouns}}));
    std::vector<std::string> res;
    for (size_t d = 0; d < dims(); ++d) res.push_back(res_name(d) + " (in " + res_unit(d) + ")");
    text.fact(text::fill(
        style.pick({"Each has {desc} and requires {res}.",
                    "Every {item} comes with {desc} and uses {res}.",
                    "The data below give, for each {item}, {desc} and its use of {res}."}),
        {{"{desc}", th.value_desc}, {"{item}", th.item_noun}, {"{res}", text::english_list(res)}}));
    // The hiking story names no organisation to tell facts about.
    if (th.intro.find("{org}") != std::string::npos) text.distractors(org, 1, 0.25);
    text.paragraph(false);

    text::Records records;
    records.row_header = text::capitalize(th.item_noun);
    records.names = names;
    for (size_t i = 0; i < n(); ++i)
      records.row_subjects.push_back(text::fill(th.subject, {{"{name}", names[i]}}));
    text::Attribute worth;
    worth.header = header(th.value_name, th.value_unit);
    worth.label = th.value_label;
    for (size_t i = 0; i < n(); ++i) {
      worth.cells.push_back(style.num(value[i]));
      worth.phrases.push_back(text::fill(
          style.pick(th.value_phrases),
          {{"{v}", amount(style, value[i], th.value_unit)}, {"{n}", style.num(value[i])}}));
    }
    records.attributes.push_back(std::move(worth));
    for (size_t d = 0; d < dims(); ++d) {
      const Resource& r = th.resources[d];
      text::Attribute a;
      a.header = header(r.name, r.unit);
      a.label = r.label;
      for (size_t i = 0; i < n(); ++i) {
        a.cells.push_back(style.num(weight[d][i]));
        const std::string v = amount(style, weight[d][i], r.unit);
        a.phrases.push_back(r.phrases.empty()
                                ? style.pick({"needs ", "requires ", "uses "}) + v + " of " + r.name
                                : text::fill(style.pick(r.phrases), {{"{v}", v}}));
      }
      records.attributes.push_back(std::move(a));
    }
    const text::Layout layout = style.record_layout(th.table);
    text.block(text::render_records(style, layout, records));

    std::vector<std::string> caps;
    for (size_t d = 0; d < dims(); ++d)
      caps.push_back(amount(style, capacity[d], res_unit(d)) + " of " + res_name(d));
    text.fact(text::fill(style.pick({"Available in total: {list}.",
                                     "The selected {items} may use at most {list} in total.",
                                     "Together, the chosen {items} can use no more than {list}.",
                                     "The whole selection may use at most {list}."}),
                         {{"{items}", th.item_nouns}, {"{list}", text::english_list(caps)}}));
    for (auto [a, b] : exclusive)
      text.fact(text::fill(style.pick({"{A} and {b} cannot both be selected.",
                                       "At most one of {a} and {b} can be chosen.",
                                       "Choosing {a} rules out {b}, and vice versa."}),
                           {{"{A}", text::capitalize(ref(a))}, {"{a}", ref(a)}, {"{b}", ref(b)}}));
    for (auto [a, b] : implies)
      text.fact(text::fill(style.pick({"Selecting {a} requires selecting {b} as well.",
                                       "{A} can only be chosen together with {b}.",
                                       "Choosing {a} means that {b} must be chosen too."}),
                           {{"{A}", text::capitalize(ref(a))}, {"{a}", ref(a)}, {"{b}", ref(b)}}));
    text.fact(text::fill(
        style.pick({"Each {item} is either selected in full or not at all.",
                    "{Items} cannot be split: each one is taken whole or left out.",
                    "There is no partial selection; {a item} is chosen entirely or not at all."}),
        {{"{item}", th.item_noun},
         {"{a item}", text::article(th.item_noun) + " " + th.item_noun},
         {"{Items}", text::capitalize(th.item_nouns)}}));
    text.paragraph();
    text.fact(text::question(
        style,
        style.pick({"which " + th.item_nouns + " to select",
                    "which of the " + th.item_nouns + " to choose",
                    "the best subset of " + th.item_nouns}),
        "maximise the " + th.objective,
        style.pick({"the maximum " + th.objective, "the best " + th.objective + " possible",
                    "the largest achievable " + th.objective})));
    return text.text();
  }

  std::string alg() const override {
    AlgebraicFormulation f("Multi-dimensional 0/1 knapsack");
    std::vector<std::string> dim_keys;
    for (size_t d = 0; d < dims(); ++d) dim_keys.push_back(text::symbol(res_name(d)));
    f.set("$I = " + latex_set(keys) + "$", "candidate " + theme().item_noun + "s");
    f.set("$D = " + latex_set(dim_keys) + "$", "limited resources");
    f.parameter("$v_i$", theme().value_name + " of $i$ (" + theme().value_unit + ")",
                latex_vector(value));
    f.parameter("$w_{d,i}$", "use of resource $d$ by $i$", latex_matrix(weight));
    f.parameter("$W_d$", "amount of resource $d$ available", latex_vector(capacity));
    f.variable("$x_i \\in \\{0,1\\}$", "1 if $i$ is selected");
    f.objective("\\max \\sum_{i \\in I} v_i x_i", "Maximise the total " + theme().value_name);
    f.constraint("capacity", "\\sum_{i \\in I} w_{d,i} x_i \\le W_d \\quad \\forall d \\in D");
    for (auto [a, b] : exclusive)
      f.constraint("exclusion",
                   "x_{" + latex_name(keys[a]) + "} + x_{" + latex_name(keys[b]) + "} \\le 1");
    for (auto [a, b] : implies)
      f.constraint("dependency",
                   "x_{" + latex_name(keys[a]) + "} \\le x_{" + latex_name(keys[b]) + "}");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set I;\nset D;\nparam v{I} >= 0;\nparam w{D, I} >= 0;\nparam W{D} >= 0;\n"
        "var x{I} binary;\n"
        "maximize TotalValue: sum{i in I} v[i] * x[i];\n"
        "s.t. Capacity{d in D}: sum{i in I} w[d, i] * x[i] <= W[d];\n";
    for (size_t k = 0; k < exclusive.size(); ++k)
      model += "s.t. Exclusive" + std::to_string(k + 1) + ": x['" + keys[exclusive[k].first] +
               "'] + x['" + keys[exclusive[k].second] + "'] <= 1;\n";
    for (size_t k = 0; k < implies.size(); ++k)
      model += "s.t. Requires" + std::to_string(k + 1) + ": x['" + keys[implies[k].first] +
               "'] <= x['" + keys[implies[k].second] + "'];\n";
    std::vector<std::string> dim_keys;
    for (size_t d = 0; d < dims(); ++d) dim_keys.push_back(text::symbol(res_name(d)));
    GmplData data;
    data.set("I", keys).set("D", dim_keys).param("v", keys, value);
    data.param("w", dim_keys, keys, weight).param("W", dim_keys, capacity);
    return compose_gmpl(model, "TotalValue", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> x(n());
    double objective = 0;
    for (size_t i = 0; i < n(); ++i) {
      x[i] = s.value("x", {keys[i]});
      c.binary(x[i], "x[" + keys[i] + "]");
      objective += value[i] * x[i];
    }
    for (size_t d = 0; d < dims(); ++d) {
      double used = 0;
      for (size_t i = 0; i < n(); ++i) used += weight[d][i] * x[i];
      c.le(used, capacity[d], "capacity of " + res_name(d));
    }
    for (auto [a, b] : exclusive) c.le(x[a] + x[b], 1, "exclusion " + keys[a] + "/" + keys[b]);
    for (auto [a, b] : implies) c.le(x[a], x[b], "dependency " + keys[a] + "->" + keys[b]);
    return c.result(objective);
  }
};

class KnapsackFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "knapsack"; }
  std::string_view title() const override {
    return "Knapsack (multi-dimensional, with logical side constraints)";
  }
  ProblemClass problem_class() const override { return ProblemClass::ip; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<KnapsackInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const int n = size_for(rng, options.difficulty, {5, 8}, {10, 18}, {20, 30});
    const int dims = size_for(rng, options.difficulty, {1, 2}, {1, 2}, {2, 3});
    inst->org = rng.pick(text::companies());
    if (th.item_names.empty()) {
      for (const auto& p : text::pick_distinct(rng, text::products(), static_cast<size_t>(n)))
        inst->names.push_back("pallet of " + p);
      for (const auto& nm : inst->names) inst->keys.push_back(text::symbol(nm.substr(10)));
    } else {
      inst->names = text::pick_distinct(rng, th.item_names, static_cast<size_t>(n));
      inst->keys = text::symbols(inst->names);
    }
    inst->weight.assign(static_cast<size_t>(dims), std::vector<double>(static_cast<size_t>(n)));
    for (int i = 0; i < n; ++i) {
      double base = 0;
      for (int d = 0; d < dims; ++d) {
        double w = rng.uniform_int(2, 60);
        inst->weight[static_cast<size_t>(d)][static_cast<size_t>(i)] = w;
        base += w;
      }
      // Values correlated with weight make the instance harder to solve greedily.
      double v = std::round(base / dims * rng.uniform(0.8, 1.6) + rng.uniform_int(1, 20));
      inst->value.push_back(v);
    }
    std::vector<int> planted(static_cast<size_t>(n));
    for (auto& p : planted) p = rng.bernoulli(0.5) ? 1 : 0;
    for (int d = 0; d < dims; ++d) {
      const auto& w = inst->weight[static_cast<size_t>(d)];
      double used = 0, total = 0;
      for (int i = 0; i < n; ++i) {
        used += w[static_cast<size_t>(i)] * planted[static_cast<size_t>(i)];
        total += w[static_cast<size_t>(i)];
      }
      double cap = std::floor(used + rng.uniform(0.0, 0.15) * (total - used));
      inst->capacity.push_back(std::min(cap, total - 1));
    }
    // Optional side constraints, each consistent with the planted subset.
    auto try_pair = [&](auto ok) {
      return draw_distinct_pair(rng, n, 50, [&](int a, int b) {
        return ok(planted[static_cast<size_t>(a)], planted[static_cast<size_t>(b)]);
      });
    };
    if (rng.bernoulli(options.side_constraint_rate)) {
      if (auto p = try_pair([](int pa, int pb) { return !(pa && pb); }))
        inst->exclusive.push_back(*p);
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      if (auto p = try_pair([](int pa, int pb) { return !(pa && !pb); }))
        inst->implies.push_back(*p);
    }
    return inst;
  }
};

}  // namespace

const Family& knapsack_family() {
  static const KnapsackFamily family;
  return family;
}

}  // namespace trex::orlib
