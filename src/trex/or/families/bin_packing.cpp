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
  std::string bin, bins;    // noun, singular and plural: "shelf", "shelves"
  std::string item;         // singular noun, "crate"
  std::string prep;         // "on" a truck, "in" a container
  std::string data_intro;   // {n} is replaced by the number of items
  std::string measure;      // "weight"
  std::string measures;     // "weights": a column of values
  std::string unit;         // "kg"
  std::string item_suffix;  // appended to a pool name for display, e.g. " crate"
  std::vector<std::string> pool;
  std::vector<int> capacities;          // candidate bin capacities
  int step;                             // sizes are multiples of this
  bool table;                           // the theme shows its data as a table more often than not
  std::vector<std::string> size_forms;  // an item's size as a clause: {size}
  std::vector<std::string> capacity;    // the bin capacity: {cap}
  std::vector<std::string> supply;      // how many bins there are: {bins}, {org}
  std::vector<std::string> whole;       // items are not split
  std::string rule;                     // a further fact of the story (may be empty)
  std::string used;                     // "needed": the bins the objective counts
  std::vector<std::string> orgs;        // empty: company names
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} is moving out of an old warehouse, and the crates below must be driven to the new "
       "site in a single run.",
       "truck",
       "trucks",
       "crate",
       "on",
       "The {n} crates and their weights are:",
       "weight",
       "weights",
       "kg",
       " crate",
       text::products(),
       {1000, 1200, 1500, 2000},
       10,
       false,
       {"weighs {size} kg", "has a weight of {size} kg"},
       {"Every truck can carry at most {cap} kg.", "A truck's load limit is {cap} kg."},
       {"Up to {bins} identical trucks can be booked for the day.",
        "{org} can book {bins} identical trucks for the day."},
       {"A crate cannot be split between trucks.", "Each crate travels whole on one truck."},
       "",
       "needed",
       {}},
      {"The IT team of {org} is consolidating virtual machines onto identical physical servers.",
       "server",
       "servers",
       "virtual machine",
       "on",
       "The {n} virtual machines need the following amounts of memory:",
       "memory",
       "memory needs",
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
       {"needs {size} GB of memory", "requires {size} GB of memory", "uses {size} GB of memory"},
       {"Each server offers {cap} GB of memory.", "A server has {cap} GB of memory."},
       {"There are {bins} servers available in the rack.", "The rack holds {bins} servers."},
       {"A virtual machine cannot be split across servers.",
        "Each virtual machine runs entirely on one server."},
       "Every server that hosts at least one virtual machine must be powered on.",
       "powered on",
       {}},
      {"{org} is exporting machinery and has to book standard shipping containers for the "
       "consignment listed below.",
       "container",
       "containers",
       "machine",
       "in",
       "The consignment consists of {n} machines:",
       "weight",
       "weights",
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
       {"weighs {size} tonnes", "has a weight of {size} tonnes"},
       {"The payload of one container is limited to {cap} tonnes.",
        "A container can take at most {cap} tonnes."},
       {"The shipping line can provide up to {bins} containers.",
        "No more than {bins} containers can be booked."},
       {"Each machine travels whole in one container.",
        "A machine cannot be split between containers."},
       "",
       "booked",
       {"Keystone Steel", "Vanguard Motors", "Falcon Aerospace", "Cobalt Robotics",
        "Delta Components", "Frontier Mining"}},
      {"{org} is moving its special collections onto new, identical shelves.",
       "shelf",
       "shelves",
       "collection",
       "on",
       "There are {n} collections; the shelf width each one occupies is:",
       "width",
       "widths",
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
       {"needs {size} cm of shelf space", "takes up {size} cm of shelf width"},
       {"Each shelf is {cap} cm wide.", "A shelf offers {cap} cm of space."},
       {"Up to {bins} empty shelves are available.", "There are {bins} empty shelves."},
       {"A collection must stay together on a single shelf.",
        "No collection may be split over two shelves."},
       "",
       "used",
       {"The Riverton public library", "The city library service", "The university library",
        "The county archive"}},
      {"Before a data-centre migration, {org} must copy its archives onto identical external "
       "backup drives.",
       "drive",
       "drives",
       "archive",
       "on",
       "The {n} archives to copy are:",
       "size",
       "sizes",
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
       {"takes up {size} GB", "needs {size} GB", "has a size of {size} GB"},
       {"Every drive holds {cap} GB.", "A drive can store up to {cap} GB."},
       {"The stock holds {bins} blank drives.", "There are {bins} blank drives in stock."},
       {"An archive may not be split over two drives.", "Each archive goes whole onto one drive."},
       "",
       "used",
       {}},
      {"{org} is putting live recordings onto audio CDs for a box set.",
       "CD",
       "CDs",
       "recording",
       "on",
       "The {n} recordings and their lengths are:",
       "playing time",
       "playing times",
       "minutes",
       "",
       {"opening overture", "harbour blues", "midnight train", "city lights",   "summer waltz",
        "rainy day",        "mountain song", "river suite",    "northern star", "last dance",
        "golden hour",      "desert wind",   "winter tale",    "morning jam",   "encore medley",
        "sea shanty",       "street parade", "quiet storm",    "big band set",  "lullaby"},
       {74, 80},
       1,
       false,
       {"runs {size} minutes", "lasts {size} minutes", "has a playing time of {size} minutes"},
       {"A CD holds at most {cap} minutes of audio.", "Each CD can take {cap} minutes of audio."},
       {"The pressing plant will make at most {bins} discs.", "At most {bins} CDs can be pressed."},
       {"Each recording must appear complete on exactly one CD.",
        "A recording cannot be split across CDs."},
       "",
       "needed",
       {"Radio Harbour FM", "City Sound Radio", "The WKXL classics station"}},
  };
  return t;
}

class BinPackingInstance : public ComposedInstance<themes> {
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

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string items = text::plural(th.item);
    // Sentences that may open with the organisation or a number of bins.
    auto sentence = [&](const std::string& form) {
      return text::capitalize(text::fill(
          form, {{"{org}", org}, {"{cap}", style.num(capacity)}, {"{bins}", style.num(bins)}}));
    };
    text.fact(text::fill(th.intro, {{"{org}", org}}));
    text.distractors(org, 1, 0.25);
    text.paragraph(false);
    text.fact(text::fill(style.pick({th.data_intro, "The {n} {items} and their {measures} are:",
                                     "Here are the {n} {items}, with their {measure} in {unit}:",
                                     "There are {n} {items} to place:"}),
                         {{"{n}", style.count(static_cast<long>(n()))},
                          {"{items}", items},
                          {"{measures}", th.measures},
                          {"{measure}", th.measure},
                          {"{unit}", th.unit}}));
    text.paragraph(false);

    text::Records records;
    records.row_header = text::capitalize(th.item);
    records.names = names;
    text::Attribute a;
    a.header = text::capitalize(th.measure) + " (" + th.unit + ")";
    a.label = th.measures + " in " + th.unit;
    for (size_t i = 0; i < n(); ++i) {
      records.row_subjects.push_back("the " + names[i]);
      a.cells.push_back(style.num(size_of[i]));
      a.phrases.push_back(text::fill(style.pick(th.size_forms), {{"{size}", a.cells.back()}}));
    }
    records.attributes.push_back(std::move(a));
    const text::Layout layout = style.record_layout(th.table);
    text.block(text::render_records(style, layout, records));

    std::vector<std::string> capacity_forms = th.capacity;
    capacity_forms.push_back("Every {bin} has a capacity of {cap} {unit}.");
    capacity_forms.push_back("The {bins} are identical, each with a capacity of {cap} {unit}.");
    text.fact(sentence(text::fill(style.pick(capacity_forms),
                                  {{"{bin}", th.bin}, {"{bins}", th.bins}, {"{unit}", th.unit}})));
    std::vector<std::string> supply_forms = th.supply;
    supply_forms.push_back("Up to {bins} " + th.bins + " are available.");
    text.fact(sentence(style.pick(supply_forms)));
    for (auto [x, y] : conflicts)
      text.fact(text::capitalize(
          text::fill(style.pick({"the {x} and the {y} must not be put {prep} the same {bin}.",
                                 "the {x} and the {y} cannot share a {bin}.",
                                 "the {x} and the {y} must go {prep} different {bins}."}),
                     {{"{x}", names[x]},
                      {"{y}", names[y]},
                      {"{prep}", th.prep},
                      {"{bin}", th.bin},
                      {"{bins}", th.bins}})));
    for (auto [x, y] : together)
      text.fact(text::capitalize(text::fill(
          style.pick({"the {x} and the {y} must be put {prep} the same {bin}.",
                      "the {x} and the {y} must share a {bin}.",
                      "the {x} has to go {prep} the same {bin} as the {y}."}),
          {{"{x}", names[x]}, {"{y}", names[y]}, {"{prep}", th.prep}, {"{bin}", th.bin}})));
    if (max_items > 0) {
      // The limit stays in digits: it is a number of the model's data.
      const std::string k = std::to_string(max_items) + " " + (max_items == 1 ? th.item : items);
      text.fact(text::fill(
          style.pick({"No {bin} may take more than {k}.", "At most {k} fit {prep} one {bin}.",
                      "Each {bin} can hold no more than {k}."}),
          {{"{bin}", th.bin}, {"{k}", k}, {"{prep}", th.prep}}));
    }
    std::vector<std::string> whole_forms = th.whole;
    whole_forms.push_back("Each " + th.item + " goes whole " + th.prep + " exactly one " + th.bin +
                          ".");
    text.fact(style.pick(whole_forms));
    text.fact(th.rule);
    text.distractors(org, 1, 0.2);
    text.paragraph();
    const std::string task =
        style.pick({"which " + th.bin + " each " + th.item + " goes " + th.prep,
                    "how to place the " + items + " " + th.prep + " the " + th.bins,
                    "an assignment of " + items + " to " + th.bins});
    const std::string goal = style.pick({"minimise the number of " + th.bins + " " + th.used,
                                         "use as few " + th.bins + " as possible"});
    const std::string value =
        style.pick({"the minimum number of " + th.bins + " " + th.used,
                    "the smallest number of " + th.bins + " that suffices",
                    "the number of " + th.bins + " " + th.used + " in the best packing"});
    text.fact(text::question(style, task, goal, value));
    return text.text();
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
