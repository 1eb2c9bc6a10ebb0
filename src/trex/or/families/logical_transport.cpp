// Transport-mode selection with logical conditions: ship divisible amounts to
// destinations by several modes (trucks, rail, barges, planes, ...), each with a
// fixed charge when used at all and a total capacity; binaries u_m switch modes
// on, linked to the flows by x <= M u with M derived from the data, and logical
// rules tie the modes together (not both, if-then, at least / at most k modes,
// minimum volume if used). MILP.
//
// Generator: plants a set U of used modes and a split of every destination's
// demand over U, sizes capacities around that plan, and draws every logical
// rule so that U satisfies it (two rules always, more with the side rate).
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

struct Mode {
  std::string name;           // "trucks", "air freight"
  double rate;                // cost per unit per 100 km
  std::pair<int, int> fixed;  // range of the fixed charge
};

struct Theme {
  std::string intro;  // {org} is replaced by an organisation name
  std::vector<std::string> orgs;
  std::string unit;                    // "tonnes"
  std::string unit_one;                // "tonne"
  std::string dest;                    // "market"
  std::vector<std::string> dest_pool;  // empty: city names
  std::string fixed_what;              // what the fixed charge pays for
  std::vector<Mode> modes;
  int unit_scale;  // demand multiplier
  bool tables;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} must ship this month's production from its factory to its regional markets.",
       {"Acme Manufacturing", "Zenith Appliances", "Ironwood Furniture", "Vanguard Motors"},
       "tonnes",
       "tonne",
       "market",
       {},
       "a monthly contract with the carrier",
       {{"trucks", 6, {400, 1500}},
        {"rail", 3, {1500, 4000}},
        {"barges", 2, {2000, 5000}},
        {"air freight", 18, {300, 1000}},
        {"intermodal containers", 4, {1000, 3000}}},
       1,
       true},
      {"After a flood, {org} has to move relief supplies from its central depot to the affected "
       "areas.",
       {"the Red Cross chapter", "a relief charity", "the civil protection agency"},
       "tonnes",
       "tonne",
       "area",
       {"North Valley camp", "Riverside shelter", "Hill district", "Old Town clinic",
        "Lakeshore village", "East bridge camp", "Mill quarter", "Southern farms"},
       "mobilising the crews and equipment",
       {{"trucks", 7, {300, 900}},
        {"helicopters", 45, {1500, 4000}},
        {"cargo planes", 20, {2000, 5000}},
        {"boats", 4, {500, 1500}},
        {"rail", 3, {1000, 3000}}},
       1,
       false},
      {"{org} must move the grain harvest from its central elevator to export ports.",
       {"The Prairie Grain Cooperative", "Golden Plains Co-op", "The Valley Farmers Union"},
       "tonnes",
       "tonne",
       "port",
       {"Port Arthur", "Port Elgin", "Port Hope", "Port Royal", "Port Clinton", "Port Jervis",
        "Port Huron", "Port Alma"},
       "chartering the service for the season",
       {{"trucks", 5, {500, 1500}},
        {"rail", 2.5, {2000, 5000}},
        {"barges", 1.5, {2500, 6000}},
        {"coastal ships", 2, {3000, 7000}},
        {"intermodal containers", 3.5, {1000, 3000}}},
       2,
       true},
      {"{org} ships ore concentrate from its mine to several smelters.",
       {"Frontier Mining", "Quarry Stone Co.", "Granite Works", "Keystone Steel"},
       "tonnes",
       "tonne",
       "smelter",
       {},
       "setting up the loading equipment",
       {{"trucks", 6, {500, 1500}},
        {"rail", 2.5, {2500, 6000}},
        {"barges", 2, {2000, 5000}},
        {"coastal ships", 2.2, {3000, 7000}},
        {"intermodal containers", 4, {1000, 3000}}},
       2,
       false},
      {"Before the holiday season, {org} has to move stock from its central warehouse to its "
       "store regions.",
       {"Northwind Traders", "Summit Outdoor Gear", "Westfield Bakery", "Atlas Packaging"},
       "pallets",
       "pallet",
       "region",
       {},
       "booking the service for the season",
       {{"trucks", 4, {300, 1200}},
        {"courier vans", 8, {100, 500}},
        {"rail", 2, {1000, 3000}},
        {"air freight", 15, {300, 900}},
        {"intermodal containers", 3, {800, 2500}}},
       1,
       true},
      {"{org} delivers cement from its plant to large building sites.",
       {"Granite Works", "Quarry Stone Co.", "Atlas Cement", "Summit Building Supply"},
       "tonnes",
       "tonne",
       "site",
       {"Harbour Towers", "Airport Terminal", "Stadium", "Hospital Wing", "Bridge Works",
        "Metro Station", "Business Park", "University Campus"},
       "renting the dedicated equipment",
       {{"trucks", 5, {300, 1000}},
        {"rail", 2.5, {2000, 5000}},
        {"barges", 2, {2000, 4500}},
        {"silo trailers", 4, {800, 2000}},
        {"intermodal containers", 3.5, {1000, 2500}}},
       1,
       false},
  };
  return t;
}

class LogicalTransportInstance : public ThemedInstance<themes> {
 public:
  std::vector<size_t> mode_ids;  // indices into theme().modes
  std::vector<std::string> mode_keys;
  std::vector<std::string> dest_names, dest_keys;
  std::vector<double> fixed;                     // F_m
  std::vector<double> capacity;                  // K_m
  std::vector<double> demand;                    // d_r
  std::vector<std::vector<double>> cost;         // c_{m,r}
  std::vector<std::pair<int, int>> exclusive;    // not both
  std::vector<std::pair<int, int>> implies;      // first used => second used
  int at_least = 0;                              // 0 = none
  int at_most = 0;                               // 0 = none
  std::vector<std::pair<int, double>> min_load;  // (mode, volume if used)
  int optional_rules = 0;                        // rules beyond the two every instance carries

  size_t nm() const { return mode_keys.size(); }
  size_t nr() const { return dest_keys.size(); }
  const std::string& mode_name(size_t m) const { return theme().modes[mode_ids[m]].name; }
  double big_m(size_t m, size_t r) const { return std::min(capacity[m], demand[r]); }
  std::string qty(double v) const { return text::num(v) + " " + theme().unit; }

  size_t rules() const {
    return exclusive.size() + implies.size() + (at_least > 0 ? 1 : 0) + (at_most > 0 ? 1 : 0) +
           min_load.size();
  }
  json size() const override {
    return {{"modes", nm()},
            {"destinations", nr()},
            {"logical_constraints", rules()},
            {"side_constraints", optional_rules}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (!exclusive.empty()) v.push_back("either_or");
    if (!implies.empty()) v.push_back("if_then");
    if (at_least > 0) v.push_back("at_least_k");
    if (at_most > 0) v.push_back("at_most_k");
    if (!min_load.empty()) v.push_back("min_volume_if_used");
    return v;
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = text::capitalize(replace_all(th.intro, "{org}", org)) + " ";
    std::vector<std::string> needs;
    for (size_t r = 0; r < nr(); ++r) needs.push_back(qty(demand[r]) + " to " + dest_names[r]);
    out += "At least " + text::english_list(needs) + " must be delivered. ";
    std::vector<std::string> names;
    for (size_t m = 0; m < nm(); ++m) names.push_back(mode_name(m));
    out += "The available transport modes are " + text::english_list(names) +
           ". Using a mode "
           "at all incurs a fixed charge (for " +
           th.fixed_what +
           "), each mode can carry only "
           "a limited total amount, and every " +
           th.unit_one +
           " shipped costs a rate that "
           "depends on the mode and the " +
           th.dest + ".\n\n";
    if (th.tables) {
      std::vector<std::string> header = {"Mode", "Fixed charge", "Capacity (" + th.unit + ")"};
      for (const auto& d : dest_names) header.push_back("Cost per " + th.unit_one + " to " + d);
      std::vector<std::vector<std::string>> rows;
      for (size_t m = 0; m < nm(); ++m) {
        std::vector<std::string> row = {text::capitalize(mode_name(m)), text::money(fixed[m]),
                                        text::num(capacity[m])};
        for (size_t r = 0; r < nr(); ++r) row.push_back(text::money(cost[m][r]));
        rows.push_back(row);
      }
      out += text::markdown_table(header, rows) + "\n";
    } else {
      for (size_t m = 0; m < nm(); ++m) {
        std::vector<std::string> rates;
        for (size_t r = 0; r < nr(); ++r)
          rates.push_back(text::money(cost[m][r]) + " per " + th.unit_one + " to " + dest_names[r]);
        out += "- " + text::capitalize(mode_name(m)) + ": fixed charge " + text::money(fixed[m]) +
               ", at most " + qty(capacity[m]) + " in total, " + text::english_list(rates) + ".\n";
      }
      out += "\n";
    }
    out += "Quantities do not have to be whole numbers, and " + text::article(th.dest) + " " +
           th.dest + " may be served by several modes. The following rules apply:\n";
    for (auto [a, b] : exclusive)
      out += "- " + text::capitalize(mode_name(static_cast<size_t>(a))) + " and " +
             mode_name(static_cast<size_t>(b)) + " cannot both be used.\n";
    for (auto [a, b] : implies)
      out += "- Using " + mode_name(static_cast<size_t>(a)) + " requires also using " +
             mode_name(static_cast<size_t>(b)) + ".\n";
    if (at_least > 0)
      out += "- To spread the risk, at least " + std::to_string(at_least) +
             " different modes must be used.\n";
    if (at_most > 0)
      out += "- To keep the paperwork manageable, at most " + std::to_string(at_most) +
             " different modes may be used.\n";
    for (auto [m, volume] : min_load)
      out += "- If the shipper uses " + mode_name(static_cast<size_t>(m)) + " at all, at least " +
             qty(volume) + " in total must go by " + mode_name(static_cast<size_t>(m)) + ".\n";
    out += "\nWhich modes should be used and how much should each carry to each " + th.dest +
           " so that the total cost (fixed charges plus shipping) is as small as possible? "
           "What is the minimum total cost?";
    return out;
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f("Transport mode selection with logical constraints");
    f.set("$M = " + latex_set(mode_keys) + "$", "transport modes");
    f.set("$R = " + latex_set(dest_keys) + "$", th.dest + "s");
    f.parameter("$F_m$", "fixed charge if mode $m$ is used (dollars)", latex_vector(fixed));
    f.parameter("$K_m$", "total capacity of mode $m$ (" + th.unit + ")", latex_vector(capacity));
    f.parameter("$d_r$", "amount required at $r$ (" + th.unit + ")", latex_vector(demand));
    f.parameter("$c_{m,r}$",
                "cost per " + th.unit_one + " from mode $m$ to $r$ (dollars), rows $m$",
                latex_matrix(cost));
    std::vector<std::vector<double>> bm(nm(), std::vector<double>(nr()));
    for (size_t m = 0; m < nm(); ++m)
      for (size_t r = 0; r < nr(); ++r) bm[m][r] = big_m(m, r);
    f.parameter("$M_{m,r} = \\min(K_m, d_r)$",
                "big-M derived from the data: mode $m$ never needs to carry more to $r$ than its "
                "capacity or the amount $r$ requires",
                latex_matrix(bm));
    if (at_least > 0)
      f.parameter("$k^{\\min}$", "minimum number of modes", std::to_string(at_least));
    if (at_most > 0) f.parameter("$k^{\\max}$", "maximum number of modes", std::to_string(at_most));
    for (auto [m, volume] : min_load)
      f.parameter(
          "$L_{" + latex_name(mode_keys[static_cast<size_t>(m)]) + "}$",
          "minimum volume of " + mode_name(static_cast<size_t>(m)) + " if used (" + th.unit + ")",
          text::num(volume));
    f.variable("$x_{m,r} \\ge 0$", "amount shipped by mode $m$ to $r$ (" + th.unit + ")");
    f.variable("$u_m \\in \\{0,1\\}$", "1 if mode $m$ is used");
    f.objective(
        "\\min \\sum_{m \\in M} F_m u_m + \\sum_{m \\in M} \\sum_{r \\in R} c_{m,r} x_{m,r}",
        "Minimise fixed charges plus shipping cost");
    f.constraint("demand", "\\sum_{m \\in M} x_{m,r} \\ge d_r \\quad \\forall r \\in R");
    f.constraint("capacity (only if used)",
                 "\\sum_{r \\in R} x_{m,r} \\le K_m u_m \\quad \\forall m \\in M");
    f.constraint("big-M link", "x_{m,r} \\le M_{m,r} u_m \\quad \\forall m \\in M, r \\in R");
    auto u = [&](int m) { return "u_{" + latex_name(mode_keys[static_cast<size_t>(m)]) + "}"; };
    for (auto [a, b] : exclusive) f.constraint("either-or", u(a) + " + " + u(b) + " \\le 1");
    for (auto [a, b] : implies) f.constraint("if-then", u(a) + " \\le " + u(b));
    if (at_least > 0) f.constraint("at least k modes", "\\sum_{m \\in M} u_m \\ge k^{\\min}");
    if (at_most > 0) f.constraint("at most k modes", "\\sum_{m \\in M} u_m \\le k^{\\max}");
    for (auto [m, volume] : min_load) {
      const std::string key = latex_name(mode_keys[static_cast<size_t>(m)]);
      f.constraint("minimum volume if used",
                   "\\sum_{r \\in R} x_{" + key + ",r} \\ge L_{" + key + "} " + u(m));
    }
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set M;\nset R;\nparam F{M} >= 0;\nparam K{M} >= 0;\nparam d{R} >= 0;\n"
        "param c{M, R} >= 0;\n"
        "param BigM{m in M, r in R} := min(K[m], d[r]);\n";
    if (at_least > 0) model += "param kmin integer > 0;\n";
    if (at_most > 0) model += "param kmax integer > 0;\n";
    if (!min_load.empty()) model += "param L{M} >= 0, default 0;\n";
    model +=
        "var x{M, R} >= 0;\nvar u{M} binary;\n"
        "minimize TotalCost: sum{m in M} F[m] * u[m] + sum{m in M, r in R} c[m, r] * x[m, r];\n"
        "s.t. Demand{r in R}: sum{m in M} x[m, r] >= d[r];\n"
        "s.t. Capacity{m in M}: sum{r in R} x[m, r] <= K[m] * u[m];\n"
        "s.t. Link{m in M, r in R}: x[m, r] <= BigM[m, r] * u[m];\n";
    auto u = [&](int m) { return "u['" + mode_keys[static_cast<size_t>(m)] + "']"; };
    for (size_t k = 0; k < exclusive.size(); ++k)
      model += "s.t. EitherOr" + std::to_string(k + 1) + ": " + u(exclusive[k].first) + " + " +
               u(exclusive[k].second) + " <= 1;\n";
    for (size_t k = 0; k < implies.size(); ++k)
      model += "s.t. IfThen" + std::to_string(k + 1) + ": " + u(implies[k].first) +
               " <= " + u(implies[k].second) + ";\n";
    if (at_least > 0) model += "s.t. AtLeast: sum{m in M} u[m] >= kmin;\n";
    if (at_most > 0) model += "s.t. AtMost: sum{m in M} u[m] <= kmax;\n";
    if (!min_load.empty())
      model += "s.t. MinVolume{m in M: L[m] > 0}: sum{r in R} x[m, r] >= L[m] * u[m];\n";
    GmplData data;
    data.set("M", mode_keys).set("R", dest_keys);
    data.param("F", mode_keys, fixed).param("K", mode_keys, capacity).param("d", dest_keys, demand);
    data.param("c", mode_keys, dest_keys, cost);
    if (at_least > 0) data.param("kmin", at_least);
    if (at_most > 0) data.param("kmax", at_most);
    if (!min_load.empty()) {
      std::vector<std::string> keys;
      std::vector<double> volumes;
      for (auto [m, volume] : min_load) {
        keys.push_back(mode_keys[static_cast<size_t>(m)]);
        volumes.push_back(volume);
      }
      data.param("L", keys, volumes);
    }
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> u(nm()), carried(nm()), received(nr());
    double objective = 0;
    double used = 0;
    for (size_t m = 0; m < nm(); ++m) {
      u[m] = s.value("u", {mode_keys[m]});
      c.binary(u[m], "u[" + mode_keys[m] + "]");
      objective += fixed[m] * u[m];
      used += u[m];
      for (size_t r = 0; r < nr(); ++r) {
        double x = s.value("x", {mode_keys[m], dest_keys[r]});
        c.ge(x, 0, "x[" + mode_keys[m] + "," + dest_keys[r] + "] nonnegative");
        carried[m] += x;
        received[r] += x;
        objective += cost[m][r] * x;
      }
      c.le(carried[m], capacity[m] * u[m], "capacity of " + mode_keys[m] + " (only if used)");
    }
    for (size_t r = 0; r < nr(); ++r) c.ge(received[r], demand[r], "demand of " + dest_keys[r]);
    for (auto [a, b] : exclusive)
      c.le(u[static_cast<size_t>(a)] + u[static_cast<size_t>(b)], 1,
           "either-or " + mode_keys[static_cast<size_t>(a)] + "/" +
               mode_keys[static_cast<size_t>(b)]);
    for (auto [a, b] : implies)
      c.le(u[static_cast<size_t>(a)], u[static_cast<size_t>(b)],
           "if-then " + mode_keys[static_cast<size_t>(a)] + "->" +
               mode_keys[static_cast<size_t>(b)]);
    if (at_least > 0) c.ge(used, at_least, "at least k modes");
    if (at_most > 0) c.le(used, at_most, "at most k modes");
    for (auto [m, volume] : min_load)
      c.ge(carried[static_cast<size_t>(m)], volume * u[static_cast<size_t>(m)],
           "minimum volume of " + mode_keys[static_cast<size_t>(m)]);
    return c.result(objective);
  }
};

class LogicalTransportFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "logical_transport"; }
  std::string_view title() const override {
    return "Transport mode selection with logical (either-or, if-then, k-of-n) constraints";
  }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<LogicalTransportInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const int nm = size_for(rng, options.difficulty, {3, 3}, {4, 4}, {5, 5});
    const int nr = size_for(rng, options.difficulty, {1, 2}, {2, 3}, {3, 4});
    const int planted_used = size_for(rng, options.difficulty, {2, 2}, {2, 3}, {2, 4});
    inst->org = rng.pick(th.orgs);
    inst->mode_ids = rng.sample(th.modes.size(), static_cast<size_t>(nm));
    std::sort(inst->mode_ids.begin(), inst->mode_ids.end());
    for (size_t id : inst->mode_ids) inst->mode_keys.push_back(text::symbol(th.modes[id].name));
    inst->dest_names = text::pick_distinct(
        rng, th.dest_pool.empty() ? text::cities() : th.dest_pool, static_cast<size_t>(nr));
    inst->dest_keys = text::symbols(inst->dest_names);

    const double scale = th.unit_scale;
    double total = 0;
    std::vector<double> distance;
    for (int r = 0; r < nr; ++r) {
      inst->demand.push_back(10 * scale * rng.uniform_int(4, 20));
      total += inst->demand.back();
      distance.push_back(rng.uniform_int(150, 900));
    }
    for (int m = 0; m < nm; ++m) {
      const Mode& mode = th.modes[inst->mode_ids[static_cast<size_t>(m)]];
      inst->fixed.push_back(50.0 * rng.uniform_int(mode.fixed.first / 50, mode.fixed.second / 50));
      std::vector<double> row;
      for (int r = 0; r < nr; ++r)
        row.push_back(std::max(1.0, std::round(mode.rate * distance[static_cast<size_t>(r)] / 100 *
                                               rng.uniform(0.85, 1.15))));
      inst->cost.push_back(row);
    }
    // Planted plan: modes in U share every destination's demand.
    const auto used_idx = rng.sample(static_cast<size_t>(nm), static_cast<size_t>(planted_used));
    std::vector<bool> used(static_cast<size_t>(nm), false);
    for (size_t m : used_idx) used[m] = true;
    std::vector<double> load(static_cast<size_t>(nm), 0.0);
    for (int r = 0; r < nr; ++r) {
      std::vector<double> share;
      double sum = 0;
      for (size_t k = 0; k < used_idx.size(); ++k) {
        share.push_back(rng.uniform(1.0, 2.0));
        sum += share.back();
      }
      for (size_t k = 0; k < used_idx.size(); ++k)
        load[used_idx[k]] += inst->demand[static_cast<size_t>(r)] * share[k] / sum;
    }
    for (int m = 0; m < nm; ++m) {
      double q = used[static_cast<size_t>(m)] ? load[static_cast<size_t>(m)] * rng.uniform(1.1, 1.4)
                                              : total * rng.uniform(0.3, 0.7);
      inst->capacity.push_back(10 * scale * std::ceil(q / (10 * scale)));
    }

    // Logical rules consistent with U: two always, each other kind with the side rate.
    enum Rule { kEitherOr, kIfThen, kAtLeast, kAtMost, kMinVolume };
    std::vector<Rule> kinds = {kEitherOr, kIfThen, kAtLeast, kAtMost, kMinVolume};
    rng.shuffle(kinds);
    auto pick_pair = [&](auto ok) {
      return draw_distinct_pair(rng, nm, 50, [&](int a, int b) {
        return ok(used[static_cast<size_t>(a)], used[static_cast<size_t>(b)]);
      });
    };
    for (size_t k = 0; k < kinds.size(); ++k) {
      if (k >= 2 && !rng.bernoulli(options.side_constraint_rate)) continue;
      const size_t before = inst->rules();
      switch (kinds[k]) {
        case kEitherOr: {
          // Prefer a used mode against an unused one, so the rule matters.
          if (auto p = pick_pair([](bool ua, bool ub) { return ua != ub; }))
            inst->exclusive.push_back(*p);
          break;
        }
        case kIfThen: {
          if (auto p = pick_pair([](bool ua, bool ub) { return !ua || ub; }))
            inst->implies.push_back(*p);
          break;
        }
        case kAtLeast:
          inst->at_least = planted_used;
          break;
        case kAtMost:
          inst->at_most = planted_used;
          break;
        case kMinVolume: {
          size_t m = rng.pick(used_idx);
          double volume = 10 * scale * std::floor(load[m] * rng.uniform(0.5, 0.9) / (10 * scale));
          if (volume > 0) inst->min_load.push_back({static_cast<int>(m), volume});
          break;
        }
      }
      if (k >= 2 && inst->rules() > before) ++inst->optional_rules;
    }
    return inst;
  }
};

}  // namespace

const Family& logical_transport_family() {
  static const LogicalTransportFamily family;
  return family;
}

}  // namespace trex::orlib
