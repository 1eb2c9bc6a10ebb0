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

struct Theme {
  std::string intro;      // story opening; {org} is replaced by an organisation name
  std::string item_noun;  // "item", "project", ...
  std::vector<std::string> item_names;
  std::string value_name;                                      // "usefulness", "net present value"
  std::string value_unit;                                      // "points", "thousand dollars"
  std::vector<std::pair<std::string, std::string>> resources;  // (name, unit), up to 3
  bool table;  // data as a Markdown table (else one sentence per item)
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"A hiking club is preparing one member's backpack for a long trek.",
       "piece of gear",
       {"tent",          "stove",        "water filter", "first-aid kit", "headlamp",
        "rain jacket",   "sleeping bag", "camera",       "map set",       "trekking poles",
        "solar charger", "binoculars",   "rope",         "fleece",        "snacks",
        "cooking pot",   "compass",      "sunscreen",    "gaiters",       "book",
        "knife",         "towel",        "pillow",       "radio",         "sandals",
        "hat",           "gloves",       "tripod",       "hammock",       "mosquito net"},
       "usefulness",
       "points",
       {{"weight", "kg"}, {"volume", "litres"}, {"cost", "dollars"}},
       false},
      {"{org} is choosing which capital projects to fund next year.",
       "project",
       text::projects(),
       "net present value",
       "thousand dollars",
       {{"budget", "thousand dollars"},
        {"engineering effort", "person-months"},
        {"management attention", "review hours"}},
       true},
      {"A cargo airline must decide which consignments to load on tonight's flight for {org}.",
       "consignment",
       {},
       "profit",
       "dollars",
       {{"weight", "tonnes"}, {"volume", "cubic metres"}, {"floor space", "square metres"}},
       true},
      {"The marketing team of {org} can run a subset of the following campaigns this quarter.",
       "campaign",
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
       {{"budget", "dollars"}, {"staff time", "hours"}, {"design time", "hours"}},
       false},
      {"A research satellite operated for {org} has room for only some of the proposed "
       "experiments.",
       "experiment",
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
       {{"power", "watts"}, {"mass", "kg"}, {"data volume", "MB per day"}},
       false},
  };
  return t;
}

class KnapsackInstance : public ThemedInstance<themes> {
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

  std::string res_name(size_t d) const { return theme().resources[d].first; }
  std::string res_unit(size_t d) const { return theme().resources[d].second; }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = replace_all(th.intro, "{org}", org) + " ";
    out += "There are " + std::to_string(n()) + " candidate " + th.item_noun + "s. Each has " +
           text::article(th.value_name) + " " + th.value_name + " (in " + th.value_unit + ")";
    std::vector<std::string> res;
    for (size_t d = 0; d < dims(); ++d) res.push_back(res_name(d) + " (" + res_unit(d) + ")");
    out += " and requires " + text::english_list(res) + ".\n\n";
    if (th.table) {
      std::vector<std::string> header = {text::capitalize(th.item_noun),
                                         text::capitalize(th.value_name)};
      for (size_t d = 0; d < dims(); ++d) header.push_back(text::capitalize(res_name(d)));
      std::vector<std::vector<std::string>> rows;
      for (size_t i = 0; i < n(); ++i) {
        std::vector<std::string> r = {names[i], text::num(value[i])};
        for (size_t d = 0; d < dims(); ++d) r.push_back(text::num(weight[d][i]));
        rows.push_back(r);
      }
      out += text::markdown_table(header, rows) + "\n";
    } else {
      for (size_t i = 0; i < n(); ++i) {
        std::vector<std::string> req;
        for (size_t d = 0; d < dims(); ++d)
          req.push_back(text::num(weight[d][i]) + " " + res_unit(d) + " of " + res_name(d));
        out += "- The " + names[i] + " is worth " + text::num(value[i]) + " " + th.value_unit +
               " and needs " + text::english_list(req) + ".\n";
      }
      out += "\n";
    }
    std::vector<std::string> caps;
    for (size_t d = 0; d < dims(); ++d)
      caps.push_back(text::num(capacity[d]) + " " + res_unit(d) + " of " + res_name(d));
    out += "In total at most " + text::english_list(caps) + " are available. ";
    for (auto [a, b] : exclusive)
      out += "The " + names[a] + " and the " + names[b] + " cannot both be selected. ";
    for (auto [a, b] : implies)
      out += "If the " + names[a] + " is selected, the " + names[b] + " must be selected too. ";
    out += "Each " + th.item_noun + " is either selected in full or not at all. Which " +
           th.item_noun + "s should be selected to maximise the total " + th.value_name +
           ", and what is that maximum?";
    return out;
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
