// Pattern-based cutting stock: stock rolls (bars, coils, ...) of one width are
// cut into ordered widths; the generator enumerates every maximal cutting
// pattern and the model chooses how many rolls to cut with each pattern so that
// all orders are met with the fewest rolls. Optional conditions: a limit on the
// pieces per roll and a limit on the number of distinct
// patterns (knife set-ups, with binaries and a big-M derived from the data). IP.
//
// Generator: any number of rolls of every pattern is feasible, so feasibility
// holds by construction; a greedy plan (the planted solution) bounds the number
// of distinct patterns offered by the set-up limit.
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

struct Theme {
  std::string intro;  // {org} is replaced by an organisation name
  std::vector<std::string> orgs;
  std::string stock;    // "jumbo roll"
  std::string piece;    // "roll"
  std::string measure;  // "width"
  std::string unit;     // "cm"
  std::vector<int> stock_sizes;
  int step;            // piece sizes are multiples of this
  bool list_patterns;  // NL lists the patterns (else only the order sizes)
  bool table;          // data as Markdown tables (else prose)
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} runs a paper mill. Its machine produces jumbo rolls that are slit into narrower "
       "customer rolls.",
       {"Oakridge Paper", "Northwind Paper Mills", "Riverside Paperworks"},
       "jumbo roll",
       "customer roll",
       "width",
       "cm",
       {200, 250, 300},
       5,
       true,
       true},
      {"The steel service centre of {org} slits wide coils into narrow strips for its "
       "customers.",
       {"Keystone Steel", "Ironbridge Metals", "Granite Works"},
       "coil",
       "strip",
       "width",
       "mm",
       {1200, 1500, 1800},
       10,
       false,
       false},
      {"{org} buys timber boards of a single standard length and cuts them into the pieces its "
       "carpenters have ordered.",
       {"Yellowstone Lumber", "Ironwood Furniture", "Cedar and Pine Joinery"},
       "board",
       "piece",
       "length",
       "cm",
       {360, 420, 480, 600},
       5,
       true,
       false},
      {"The plumbing contractor {org} needs pipe sections for a new housing block and cuts them "
       "from standard pipes.",
       {"Bluewater Plumbing", "Summit Pipeworks", "Harbor Mechanical"},
       "standard pipe",
       "section",
       "length",
       "cm",
       {500, 600},
       5,
       false,
       true},
      {"{org} cuts fabric bolts lengthwise into bands for its upholstery line.",
       {"Evergreen Textiles", "Loomcraft Upholstery", "Velvet Line Interiors"},
       "bolt",
       "band",
       "width",
       "cm",
       {140, 150, 160},
       5,
       true,
       true},
      {"The electrical wholesaler {org} sells cable cut to length from full drums.",
       {"Volt Wholesale", "Brightwire Supply", "Meridian Electrical"},
       "drum",
       "cable piece",
       "length",
       "m",
       {250, 300, 500},
       5,
       false,
       false},
  };
  return t;
}

using Pattern = std::vector<int>;  // pieces of each order size

// Every pattern that fits the stock size, has at most `max_pieces` pieces
// (0 = no limit) and is maximal: no further piece can be added.
std::vector<Pattern> maximal_patterns(const std::vector<double>& sizes, double stock,
                                      int max_pieces) {
  std::vector<Pattern> out;
  const double smallest = *std::min_element(sizes.begin(), sizes.end());
  Pattern current(sizes.size(), 0);
  auto recurse = [&](auto&& self, size_t k, double left, int pieces) -> void {
    if (k == sizes.size()) {
      bool full = left < smallest || (max_pieces > 0 && pieces >= max_pieces);
      if (full && pieces > 0) out.push_back(current);
      return;
    }
    int most = static_cast<int>(std::floor(left / sizes[k] + 1e-9));
    if (max_pieces > 0) most = std::min(most, max_pieces - pieces);
    for (int a = most; a >= 0; --a) {
      current[k] = a;
      self(self, k + 1, left - a * sizes[k], pieces + a);
    }
    current[k] = 0;
  };
  recurse(recurse, 0, stock, 0);
  return out;
}

class CuttingStockInstance : public ThemedInstance<themes> {
 public:
  double stock = 0;               // W
  std::vector<double> sizes;      // w_i
  std::vector<double> demand;     // q_i
  std::vector<std::string> keys;  // order symbols
  std::vector<Pattern> patterns;  // a_{i,k} = patterns[k][i]
  int max_pieces = 0;             // 0 = no knife limit
  int max_setups = 0;             // 0 = no limit on distinct patterns

  size_t n() const { return sizes.size(); }
  size_t np() const { return patterns.size(); }
  std::vector<std::string> pattern_keys() const { return numbered("P", static_cast<int>(np())); }

  double waste(size_t k) const {
    double used = 0;
    for (size_t i = 0; i < n(); ++i) used += patterns[k][i] * sizes[i];
    return stock - used;
  }
  // Most rolls of pattern k an optimal plan can need: beyond this, pattern k
  // alone overfills every order it serves.
  double big_m(size_t k) const {
    double most = 0;
    for (size_t i = 0; i < n(); ++i)
      if (patterns[k][i] > 0) most = std::max(most, std::ceil(demand[i] / patterns[k][i]));
    return most;
  }
  std::string piece_label(size_t i) const { return text::num(sizes[i]) + " " + theme().unit; }
  std::string pattern_text(size_t k) const {
    std::vector<std::string> parts;
    for (size_t i = 0; i < n(); ++i)
      if (patterns[k][i] > 0)
        parts.push_back(std::to_string(patterns[k][i]) + " x " + piece_label(i));
    return text::english_list(parts, "+");
  }

  json size() const override {
    size_t side = (max_pieces > 0 ? 1 : 0) + (max_setups > 0 ? 1 : 0);
    return {{"order_sizes", n()}, {"patterns", np()}, {"side_constraints", side}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {theme().list_patterns ? "patterns_listed" : "sizes_only"};
    if (max_pieces > 0) v.push_back("max_pieces_per_roll");
    if (max_setups > 0) v.push_back("max_patterns");
    return v;
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = replace_all(th.intro, "{org}", org) + " Every " + th.stock + " is " +
                      text::num(stock) + " " + th.unit + " " +
                      (th.measure == "width" ? "wide" : "long") + ". The current orders are:\n\n";
    if (th.table) {
      std::vector<std::vector<std::string>> rows;
      for (size_t i = 0; i < n(); ++i) rows.push_back({piece_label(i), text::num(demand[i])});
      out += text::markdown_table({text::capitalize(th.measure), "Pieces ordered"}, rows);
    } else {
      for (size_t i = 0; i < n(); ++i)
        out += "- " + text::num(demand[i]) + " " + th.piece + "s of " + piece_label(i) + "\n";
    }
    out += "\n";
    if (max_pieces > 0)
      out += "Because of the cutting equipment, at most " + std::to_string(max_pieces) +
             " pieces can be cut from one " + th.stock + ". ";
    if (th.list_patterns) {
      out +=
          "The planners have listed every cutting pattern that leaves no room for a further "
          "piece";
      out += max_pieces > 0 ? " (within the piece limit):\n\n" : ":\n\n";
      if (th.table) {
        std::vector<std::string> header = {"Pattern"};
        for (size_t i = 0; i < n(); ++i) header.push_back(piece_label(i));
        header.push_back("Trim loss (" + th.unit + ")");
        std::vector<std::vector<std::string>> rows;
        for (size_t k = 0; k < np(); ++k) {
          std::vector<std::string> r = {"P" + std::to_string(k + 1)};
          for (size_t i = 0; i < n(); ++i) r.push_back(std::to_string(patterns[k][i]));
          r.push_back(text::num(waste(k)));
          rows.push_back(r);
        }
        out += text::markdown_table(header, rows) + "\n";
      } else {
        for (size_t k = 0; k < np(); ++k)
          out += "- Pattern P" + std::to_string(k + 1) + ": " + pattern_text(k) + " (trim loss " +
                 text::num(waste(k)) + " " + th.unit + ")\n";
        out += "\n";
      }
      out += "Each " + th.stock + " is cut with exactly one of these patterns. ";
    } else {
      out += "A " + th.stock + " can be cut into any combination of the ordered " + th.measure +
             "s whose total does not exceed " + text::num(stock) + " " + th.unit +
             "; the rest is scrap (cutting itself loses no material). ";
    }
    if (max_setups > 0)
      out += "Every change of cutting pattern needs a slow machine set-up, so at most " +
             std::to_string(max_setups) + " different cutting patterns may be used. ";
    out +=
        "Every order must be met in full (extra pieces may be produced and kept in stock). "
        "Only whole " +
        th.stock + "s can be cut. What is the minimum number of " + th.stock +
        "s that must be cut, and how many should be cut with each pattern?";
    return out;
  }

  std::string alg() const override {
    const Theme& th = theme();
    const std::vector<std::string> pk = pattern_keys();
    AlgebraicFormulation f("Cutting stock (pattern formulation)");
    f.set("$I = " + latex_set(keys) + "$", "ordered " + th.measure + "s");
    f.set("$K = " + latex_set(pk) + "$",
          std::string("cutting patterns that leave no room for another piece") +
              (max_pieces > 0 ? " within the piece limit" : "") + " (enumerated from the data)");
    f.parameter("$W$", th.stock + " " + th.measure + " (" + th.unit + ")", text::num(stock));
    f.parameter("$w_i$", th.measure + " of order $i$ (" + th.unit + ")", latex_vector(sizes));
    f.parameter("$q_i$", "pieces ordered of $i$", latex_vector(demand));
    std::vector<std::vector<double>> a(n(), std::vector<double>(np()));
    for (size_t i = 0; i < n(); ++i)
      for (size_t k = 0; k < np(); ++k) a[i][k] = patterns[k][i];
    f.parameter("$a_{i,k}$",
                "pieces of $i$ cut by pattern $k$ (rows $i$; each column satisfies "
                "$\\sum_i w_i a_{i,k} \\le W$)",
                latex_matrix(a));
    if (max_setups > 0) {
      std::vector<double> m;
      for (size_t k = 0; k < np(); ++k) m.push_back(big_m(k));
      f.parameter("$S$", "maximum number of distinct patterns", std::to_string(max_setups));
      f.parameter("$M_k$",
                  "big-M: $\\max_{i: a_{i,k} > 0} \\lceil q_i / a_{i,k} \\rceil$, the most rolls "
                  "of $k$ an optimal plan can use",
                  latex_vector(m));
    }
    f.variable("$z_k \\in \\mathbb{Z}_{\\ge 0}$", th.stock + "s cut with pattern $k$");
    if (max_setups > 0) f.variable("$u_k \\in \\{0,1\\}$", "1 if pattern $k$ is used");
    f.objective("\\min \\sum_{k \\in K} z_k", "Minimise the number of " + th.stock + "s cut");
    f.constraint("demand", "\\sum_{k \\in K} a_{i,k} z_k \\ge q_i \\quad \\forall i \\in I");
    if (max_setups > 0) {
      f.constraint("pattern use link", "z_k \\le M_k u_k \\quad \\forall k \\in K");
      f.constraint("set-up limit", "\\sum_{k \\in K} u_k \\le S");
    }
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set I;\nset K;\nparam q{I} >= 0;\nparam a{I, K} >= 0, integer;\n"
        "var z{K} >= 0, integer;\n";
    if (max_setups > 0)
      model +=
          "param S integer > 0;\n"
          "param M{k in K} := max{i in I: a[i, k] > 0} ceil(q[i] / a[i, k]);\n"
          "var u{K} binary;\n";
    model +=
        "minimize Rolls: sum{k in K} z[k];\n"
        "s.t. Demand{i in I}: sum{k in K} a[i, k] * z[k] >= q[i];\n";
    if (max_setups > 0)
      model +=
          "s.t. UseLink{k in K}: z[k] <= M[k] * u[k];\n"
          "s.t. SetupLimit: sum{k in K} u[k] <= S;\n";
    const std::vector<std::string> pk = pattern_keys();
    std::vector<std::vector<double>> a(n(), std::vector<double>(np()));
    for (size_t i = 0; i < n(); ++i)
      for (size_t k = 0; k < np(); ++k) a[i][k] = patterns[k][i];
    GmplData data;
    std::vector<std::string> size_notes;
    for (size_t i = 0; i < n(); ++i) size_notes.push_back(keys[i] + " = " + piece_label(i));
    data.raw("# ordered " + theme().measure + "s: " + join(size_notes, ", ") + "; stock " +
             theme().measure + " " + text::num(stock) + " " + theme().unit);
    data.set("I", keys).set("K", pk).param("q", keys, demand).param("a", keys, pk, a);
    if (max_setups > 0) data.param("S", max_setups);
    return compose_gmpl(model, "Rolls", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    const std::vector<std::string> pk = pattern_keys();
    std::vector<double> made(n(), 0.0);
    double objective = 0;
    int used = 0;
    for (size_t k = 0; k < np(); ++k) {
      double z = s.value("z", {pk[k]});
      c.ge(z, 0, "z[" + pk[k] + "] nonnegative");
      c.integral(z, "z[" + pk[k] + "]");
      objective += z;
      if (z > 0.5) ++used;
      double width = 0;
      int pieces = 0;
      for (size_t i = 0; i < n(); ++i) {
        made[i] += patterns[k][i] * z;
        width += patterns[k][i] * sizes[i];
        pieces += patterns[k][i];
      }
      // The patterns are instance data, but re-validate them against the stock size.
      c.le(width, stock, "pattern " + pk[k] + " fits the stock");
      if (max_pieces > 0) c.le(pieces, max_pieces, "pattern " + pk[k] + " piece limit");
    }
    for (size_t i = 0; i < n(); ++i) c.ge(made[i], demand[i], "order " + keys[i]);
    if (max_setups > 0) c.le(used, max_setups, "distinct patterns used");
    return c.result(objective);
  }
};

// Greedy plan: repeatedly cut the pattern that covers the most outstanding
// material. Returns rolls per pattern.
std::vector<int> greedy_plan(const CuttingStockInstance& inst) {
  std::vector<double> left = inst.demand;
  std::vector<int> rolls(inst.np(), 0);
  for (;;) {
    double best_cover = 0;
    size_t best = 0;
    for (size_t k = 0; k < inst.np(); ++k) {
      double cover = 0;
      for (size_t i = 0; i < inst.n(); ++i)
        cover += std::min<double>(inst.patterns[k][i], left[i]) * inst.sizes[i];
      if (cover > best_cover) best_cover = cover, best = k;
    }
    if (best_cover <= 0) break;
    ++rolls[best];
    for (size_t i = 0; i < inst.n(); ++i) left[i] = std::max(0.0, left[i] - inst.patterns[best][i]);
  }
  return rolls;
}

class CuttingStockFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "cutting_stock"; }
  std::string_view title() const override { return "Cutting stock (enumerated patterns)"; }
  ProblemClass problem_class() const override { return ProblemClass::ip; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<CuttingStockInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const int n = size_for(rng, options.difficulty, {3, 3}, {3, 4}, {4, 5});
    const std::pair<int, int> demand = options.difficulty == Difficulty::easy ? std::pair{4, 20}
                                       : options.difficulty == Difficulty::medium
                                           ? std::pair{8, 40}
                                           : std::pair{15, 60};
    inst->org = rng.pick(th.orgs);
    inst->stock = rng.pick(th.stock_sizes);
    const double step = th.step;
    const bool knife_limit = rng.bernoulli(options.side_constraint_rate);
    // Distinct sizes between 18% and 55% of the stock; redraw until the pattern
    // list is short enough to read.
    for (int attempt = 0;; ++attempt) {
      std::vector<double> sizes;
      const int lo = static_cast<int>(std::ceil(0.18 * inst->stock / step));
      const int hi = static_cast<int>(std::floor(0.55 * inst->stock / step));
      for (size_t pick : rng.sample(static_cast<size_t>(hi - lo + 1), static_cast<size_t>(n)))
        sizes.push_back((lo + static_cast<int>(pick)) * step);
      std::sort(sizes.rbegin(), sizes.rend());
      int pieces_cap = 0;
      if (knife_limit) {
        int most = static_cast<int>(std::floor(inst->stock / sizes.back()));
        if (most >= 3) pieces_cap = rng.uniform_int(2, most - 1);
      }
      auto patterns = maximal_patterns(sizes, inst->stock, pieces_cap);
      if (patterns.size() >= 3 && (patterns.size() <= 20 || attempt >= 30)) {
        inst->sizes = sizes;
        inst->patterns = std::move(patterns);
        inst->max_pieces = pieces_cap;
        break;
      }
    }
    for (int i = 0; i < n; ++i) {
      inst->keys.push_back("w" + text::num(inst->sizes[static_cast<size_t>(i)]));
      inst->demand.push_back(rng.uniform_int(demand.first, demand.second));
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<int> plan = greedy_plan(*inst);
      int distinct = 0;
      for (int r : plan) distinct += r > 0 ? 1 : 0;
      if (distinct >= 2 && distinct < static_cast<int>(inst->np())) inst->max_setups = distinct;
    }
    return inst;
  }
};

}  // namespace

const Family& cutting_stock_family() {
  static const CuttingStockFamily family;
  return family;
}

}  // namespace trex::orlib
