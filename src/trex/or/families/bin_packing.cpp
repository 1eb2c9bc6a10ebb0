// Bin packing into identical bins with optional conflict, same-bin and
// items-per-bin side constraints. IP.
//
// Generator: draws item sizes that need at least two bins, packs them with
// first-fit decreasing (the planted solution) and offers that many bins (plus
// at most one spare), so the model is feasible; side constraints are read off
// the planted packing. The model breaks the symmetry of identical bins (used
// bins first; the r-th item by name goes to one of the first r bins), without
// which CBC needs seconds on a dozen items.
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
  std::string intro;        // {org} is replaced by an organisation name
  std::string bin;          // singular noun, "truck"
  std::string item;         // singular noun, "crate"
  std::string prep;         // "on" a truck, "in" a container
  std::string data_intro;   // {n} is replaced by the number of items
  std::string measure;      // "weight"
  std::string unit;         // "kg"
  std::string item_suffix;  // appended to a pool name for display, e.g. " crate"
  std::vector<std::string> pool;
  std::vector<int> capacities;  // candidate bin capacities
  int step;                     // sizes are multiples of this
  bool table;                   // data as a Markdown table (else one line per item)
  std::string line;             // prose line: {name}, {size}
  std::string cap_sentence;     // {cap}, {bins}
  std::string question;
  std::vector<std::string> orgs;  // empty: company names
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} is moving out of an old warehouse, and the crates below must be driven to the new "
       "site in a single run.",
       "truck",
       "crate",
       "on",
       "The {n} crates and their weights are:",
       "weight",
       "kg",
       " crate",
       text::products(),
       {1000, 1200, 1500, 2000},
       10,
       false,
       "- The {name} weighs {size} kg.",
       "Every truck can carry at most {cap} kg, and {bins} identical trucks can be booked for the "
       "day.",
       "How many trucks are needed at minimum, and which crate should go on which truck?",
       {}},
      {"The IT team of {org} is consolidating virtual machines onto identical physical servers.",
       "server",
       "virtual machine",
       "on",
       "The {n} virtual machines need the following amounts of memory:",
       "memory",
       "GB",
       "",
       {"web frontend",  "api gateway",   "auth service",     "billing db",    "search index",
        "cache node",    "mail relay",    "log collector",    "metrics store", "build runner",
        "file share",    "chat server",   "video transcoder", "ml trainer",    "backup agent",
        "dns resolver",  "vpn gateway",   "crm app",          "wiki",          "ticketing",
        "payroll",       "analytics etl", "image resizer",    "message queue", "report engine",
        "license server"},
       {64, 96, 128, 256},
       2,
       true,
       "",
       "Each server offers {cap} GB of memory, and {bins} servers are available in the rack.",
       "A virtual machine cannot be split across servers. Every server that hosts at least one "
       "virtual machine must be powered on; minimise the number of servers powered on.",
       {}},
      {"{org} is exporting machinery and has to book standard shipping containers for the "
       "consignment listed below.",
       "container",
       "machine",
       "in",
       "The consignment consists of {n} machines:",
       "weight",
       "tonnes",
       "",
       {"generator",       "lathe",    "hydraulic press", "turbine",      "compressor",
        "boiler",          "forklift", "conveyor",        "pump",         "crane arm",
        "transformer",     "kiln",     "mixer",           "drill rig",    "loom",
        "milling machine", "chiller",  "welding robot",   "grinder",      "boring mill",
        "saw line",        "extruder", "printing press",  "packing robot"},
       {20, 24, 26, 28},
       1,
       true,
       "",
       "The payload of one container is limited to {cap} tonnes; the shipping line can provide up "
       "to {bins} containers.",
       "Each machine travels whole in one container. How many containers must {org} book at "
       "minimum?",
       {"Keystone Steel", "Vanguard Motors", "Falcon Aerospace", "Cobalt Robotics",
        "Delta Components", "Frontier Mining"}},
      {"{org} is moving its special collections onto new, identical shelves.",
       "shelf",
       "collection",
       "on",
       "There are {n} collections; the shelf width each one occupies is:",
       "width",
       "cm",
       " collection",
       {"atlas",
        "poetry",
        "cookbook",
        "biography",
        "travel guide",
        "science fiction",
        "history",
        "art book",
        "comic",
        "dictionary",
        "childrens book",
        "music score",
        "local history",
        "philosophy",
        "gardening",
        "map",
        "newspaper archive",
        "medical",
        "law",
        "sports",
        "architecture",
        "photography",
        "folklore",
        "language course"},
       {90, 100, 120, 150},
       1,
       false,
       "- The {name} needs {size} cm of shelf space.",
       "Each shelf is {cap} cm wide and {bins} empty shelves are available.",
       "A collection must stay together on a single shelf. Using as few shelves as possible, how "
       "should the collections be placed, and how many shelves are used?",
       {"The Riverton public library", "The city library service", "The university library",
        "The county archive"}},
      {"Before a data-centre migration, {org} must copy its archives onto identical external "
       "backup drives.",
       "drive",
       "archive",
       "on",
       "The {n} archives to copy are:",
       "size",
       "GB",
       "",
       {"photos",           "tax records",      "customer emails", "source code",
        "video footage",    "design files",     "payroll",         "scanned contracts",
        "research data",    "marketing assets", "training videos", "database dumps",
        "audio recordings", "cad drawings",     "web logs",        "invoices",
        "product images",   "legal files",      "hr records",      "survey results",
        "sensor data",      "press kit",        "annual reports",  "support tickets"},
       {500, 750, 1000, 2000},
       5,
       true,
       "",
       "Every drive holds {cap} GB and {bins} blank drives are in stock.",
       "An archive may not be split over two drives. What is the smallest number of drives that "
       "must be used?",
       {}},
      {"{org} is putting live recordings onto audio CDs for a box set.",
       "CD",
       "recording",
       "on",
       "The {n} recordings and their lengths are:",
       "playing time",
       "minutes",
       "",
       {"opening overture", "harbour blues", "midnight train", "city lights",   "summer waltz",
        "rainy day",        "mountain song", "river suite",    "northern star", "last dance",
        "golden hour",      "desert wind",   "winter tale",    "morning jam",   "encore medley",
        "sea shanty",       "street parade", "quiet storm",    "big band set",  "lullaby"},
       {74, 80},
       1,
       false,
       "- {name}: {size} minutes",
       "A CD holds at most {cap} minutes of audio, and the pressing plant will make at most "
       "{bins} discs.",
       "Each recording must appear complete on exactly one CD. Find the minimum number of CDs.",
       {"Radio Harbour FM", "City Sound Radio", "The WKXL classics station"}},
  };
  return t;
}

class BinPackingInstance : public ThemedInstance<themes> {
 public:
  std::vector<std::string> names;              // display names
  std::vector<std::string> keys;               // MathProg symbols
  std::vector<double> size_of;                 // w_i
  double capacity = 0;                         // C
  int bins = 0;                                // candidate bins, numbered 1..bins
  std::vector<std::pair<int, int>> conflicts;  // never in the same bin
  std::vector<std::pair<int, int>> together;   // always in the same bin
  int max_items = 0;                           // per bin; 0 = no limit

  size_t n() const { return size_of.size(); }
  std::vector<std::string> bin_keys() const { return numbered("", bins); }

  json size() const override {
    size_t side = conflicts.size() + together.size() + (max_items > 0 ? 1 : 0);
    return {{"items", n()}, {"bins", bins}, {"side_constraints", side}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (!conflicts.empty()) v.push_back("conflict");
    if (!together.empty()) v.push_back("same_bin");
    if (max_items > 0) v.push_back("max_items_per_bin");
    return v;
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = replace_all(th.intro, "{org}", org) + " ";
    out += replace_all(th.data_intro, "{n}", std::to_string(n())) + "\n\n";
    if (th.table) {
      std::vector<std::vector<std::string>> rows;
      for (size_t i = 0; i < n(); ++i) rows.push_back({names[i], text::num(size_of[i])});
      out += text::markdown_table(
          {text::capitalize(th.item), text::capitalize(th.measure) + " (" + th.unit + ")"}, rows);
    } else {
      for (size_t i = 0; i < n(); ++i)
        out +=
            text::fill(th.line, {{"{name}", names[i]}, {"{size}", text::num(size_of[i])}}) + "\n";
    }
    out += "\n";
    out += text::fill(th.cap_sentence,
                      {{"{cap}", text::num(capacity)}, {"{bins}", std::to_string(bins)}});
    out += " ";
    for (auto [a, b] : conflicts)
      out += "The " + names[a] + " and the " + names[b] + " must not be put " + th.prep +
             " the same " + th.bin + ". ";
    for (auto [a, b] : together)
      out += "The " + names[a] + " and the " + names[b] + " must be put " + th.prep + " the same " +
             th.bin + ". ";
    if (max_items > 0)
      out += "No " + th.bin + " may take more than " + std::to_string(max_items) + " " + th.item +
             "s. ";
    out += replace_all(th.question, "{org}", org);
    return out;
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f("Bin packing");
    f.set("$I = " + latex_set(keys) + "$", th.item + "s");
    f.set("$B = \\{1,\\dots," + std::to_string(bins) + "\\}$", "candidate " + th.bin + "s");
    f.parameter("$w_i$", th.measure + " of $i$ (" + th.unit + ")", latex_vector(size_of));
    f.parameter("$C$", "capacity of every " + th.bin + " (" + th.unit + ")", text::num(capacity));
    if (max_items > 0)
      f.parameter("$K$", "maximum number of " + th.item + "s per " + th.bin,
                  std::to_string(max_items));
    f.variable("$x_{i,b} \\in \\{0,1\\}$", "1 if $i$ is placed " + th.prep + " " + th.bin + " $b$");
    f.variable("$y_b \\in \\{0,1\\}$", "1 if " + th.bin + " $b$ is used");
    f.objective("\\min \\sum_{b \\in B} y_b", "Minimise the number of " + th.bin + "s used");
    f.constraint("assignment", "\\sum_{b \\in B} x_{i,b} = 1 \\quad \\forall i \\in I");
    f.constraint("capacity", "\\sum_{i \\in I} w_i x_{i,b} \\le C y_b \\quad \\forall b \\in B");
    f.constraint("symmetry breaking: used bins come first",
                 "y_b \\le y_{b-1} \\quad \\forall b \\in B, b \\ge 2");
    f.constraint(
        "symmetry breaking: the item of rank $r_i$ (position of $i$ in $I$ sorted by "
        "name) goes to one of the first $r_i$ bins",
        "x_{i,b} = 0 \\quad \\forall i \\in I, b \\in B, b > r_i");
    if (max_items > 0)
      f.constraint("items per " + th.bin,
                   "\\sum_{i \\in I} x_{i,b} \\le K \\quad \\forall b \\in B");
    for (auto [a, b] : conflicts)
      f.constraint("conflict", "x_{" + latex_name(keys[a]) + ",b} + x_{" + latex_name(keys[b]) +
                                   ",b} \\le 1 \\quad \\forall b \\in B");
    for (auto [a, b] : together)
      f.constraint("same " + th.bin, "x_{" + latex_name(keys[a]) + ",b} = x_{" +
                                         latex_name(keys[b]) + ",b} \\quad \\forall b \\in B");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set I;\nparam nbins integer > 0;\nset B := 1..nbins;\nparam w{I} > 0;\nparam C > 0;\n";
    if (max_items > 0) model += "param K integer > 0;\n";
    model +=
        "var x{I, B} binary;\nvar y{B} binary;\n"
        "minimize BinsUsed: sum{b in B} y[b];\n"
        "s.t. Assign{i in I}: sum{b in B} x[i, b] = 1;\n"
        "s.t. Capacity{b in B}: sum{i in I} w[i] * x[i, b] <= C * y[b];\n"
        "s.t. UsedFirst{b in B: b >= 2}: y[b] <= y[b - 1];\n"
        "param rank{i in I} := 1 + card({j in I: j < i});\n"
        "s.t. LowBins{i in I, b in B: b > rank[i]}: x[i, b] = 0;\n";
    if (max_items > 0) model += "s.t. MaxItems{b in B}: sum{i in I} x[i, b] <= K;\n";
    for (size_t k = 0; k < conflicts.size(); ++k)
      model += "s.t. Conflict" + std::to_string(k + 1) + "{b in B}: x['" +
               keys[conflicts[k].first] + "', b] + x['" + keys[conflicts[k].second] +
               "', b] <= 1;\n";
    for (size_t k = 0; k < together.size(); ++k)
      model += "s.t. SameBin" + std::to_string(k + 1) + "{b in B}: x['" + keys[together[k].first] +
               "', b] = x['" + keys[together[k].second] + "', b];\n";
    GmplData data;
    data.set("I", keys).param("nbins", bins).param("w", keys, size_of).param("C", capacity);
    if (max_items > 0) data.param("K", max_items);
    return compose_gmpl(model, "BinsUsed", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    const std::vector<std::string> bk = bin_keys();
    std::vector<std::vector<double>> x(n(), std::vector<double>(bk.size()));
    double objective = 0;
    for (size_t b = 0; b < bk.size(); ++b) {
      double y = s.value("y", {bk[b]});
      c.binary(y, "y[" + bk[b] + "]");
      objective += y;
      double load = 0, count = 0;
      for (size_t i = 0; i < n(); ++i) {
        x[i][b] = s.value("x", {keys[i], bk[b]});
        c.binary(x[i][b], "x[" + keys[i] + "," + bk[b] + "]");
        load += size_of[i] * x[i][b];
        count += x[i][b];
      }
      c.le(load, capacity * y, "capacity of bin " + bk[b]);
      if (max_items > 0) c.le(count, max_items, "items in bin " + bk[b]);
      for (auto [i, j] : conflicts)
        c.le(x[i][b] + x[j][b], 1, "conflict " + keys[i] + "/" + keys[j] + " in bin " + bk[b]);
      for (auto [i, j] : together)
        c.eq(x[i][b], x[j][b], "same bin " + keys[i] + "/" + keys[j] + " in bin " + bk[b]);
    }
    for (size_t i = 0; i < n(); ++i) {
      double placed = 0;
      for (size_t b = 0; b < bk.size(); ++b) placed += x[i][b];
      c.eq(placed, 1, "placement of " + keys[i]);
    }
    return c.result(objective);
  }
};

// First-fit decreasing: bin index of every item.
std::vector<int> first_fit_decreasing(const std::vector<double>& sizes, double capacity) {
  std::vector<size_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<double> load;
  std::vector<int> bin_of(sizes.size(), -1);
  for (size_t i : order) {
    size_t b = 0;
    while (b < load.size() && load[b] + sizes[i] > capacity) ++b;
    if (b == load.size()) load.push_back(0);
    load[b] += sizes[i];
    bin_of[i] = static_cast<int>(b);
  }
  return bin_of;
}

class BinPackingFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "bin_packing"; }
  std::string_view title() const override {
    return "Bin packing (identical bins, side conditions)";
  }
  ProblemClass problem_class() const override { return ProblemClass::ip; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<BinPackingInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    const int n = size_for(rng, options.difficulty, {4, 6}, {6, 9}, {9, 12});
    inst->org = rng.pick(th.orgs.empty() ? text::companies() : th.orgs);
    for (const auto& p : text::pick_distinct(rng, th.pool, static_cast<size_t>(n))) {
      inst->names.push_back(p + th.item_suffix);
      inst->keys.push_back(text::symbol(p));
    }
    inst->capacity = rng.pick(th.capacities);
    const double cap = inst->capacity, step = th.step;
    // Sizes between 15% and 60% of a bin; redraw until more than one bin is needed.
    double total = 0;
    do {
      inst->size_of.clear();
      total = 0;
      for (int i = 0; i < n; ++i) {
        double lo = std::max(step, std::ceil(0.15 * cap / step) * step);
        double hi = std::floor(0.6 * cap / step) * step;
        double w = lo + step * rng.uniform_int(0, static_cast<int>((hi - lo) / step));
        inst->size_of.push_back(w);
        total += w;
      }
    } while (total <= 1.1 * cap);

    const std::vector<int> planted = first_fit_decreasing(inst->size_of, cap);
    const int used = *std::max_element(planted.begin(), planted.end()) + 1;
    inst->bins = used + rng.uniform_int(0, 1);

    // Optional side constraints, each satisfied by the planted packing.
    auto try_pair = [&](bool same) {
      return draw_distinct_pair(rng, n, 50, [&](int a, int b) {
        return (planted[static_cast<size_t>(a)] == planted[static_cast<size_t>(b)]) == same;
      });
    };
    if (rng.bernoulli(options.side_constraint_rate)) {
      if (auto p = try_pair(false)) inst->conflicts.push_back(in_order(*p));
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      if (auto p = try_pair(true)) inst->together.push_back(in_order(*p));
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      std::vector<int> count(static_cast<size_t>(used));
      for (int b : planted) ++count[static_cast<size_t>(b)];
      int most = *std::max_element(count.begin(), count.end());
      if (most >= 2) inst->max_items = most;
    }
    return inst;
  }
};

}  // namespace

const Family& bin_packing_family() {
  static const BinPackingFamily family;
  return family;
}

}  // namespace trex::orlib
