// Capacitated facility location: open sites (fixed cost, capacity) and ship
// divisible amounts to customers at per-unit costs, with optional limits on the
// number of open sites, mutually exclusive sites and a minimum throughput for
// every open site. MILP.
//
// Generator: plants a set S of open sites whose capacities add up to at least
// 1.2 x total demand (every single site is too small to serve everybody), and a
// proportional split of every customer's demand over S; side constraints are
// read off that plan.
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
  std::string intro;                       // {org} is replaced by an organisation name
  std::string site;                        // "warehouse"
  std::string customer;                    // "store"
  std::string unit;                        // "pallets"
  std::string unit_one;                    // "pallet"
  std::string period;                      // "per week"
  std::vector<std::string> customer_pool;  // empty: city names
  std::vector<std::string> org_pool;       // empty: company names
  double cost_rate;            // transport cost per unit per 10 distance units; < 1 gives cents
  std::pair<int, int> demand;  // demand range
  int demand_step;
  bool tables;  // shows its data as Markdown tables more often than not
  // How a customer is named in a sentence, {name} its name: "the store in
  // {name}", "{name} Hospital", "{name}".
  std::string customer_form;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"{org} is redesigning its retail distribution network. It can rent warehouses in several "
       "candidate cities and must supply its stores from the warehouses it opens.",
       "warehouse",
       "store",
       "pallets",
       "pallet",
       "per week",
       {},
       {},
       1.0,
       {20, 90},
       5,
       true,
       "the store in {name}"},
      {"{org} is deciding where to operate blood banks that supply the hospitals in its area.",
       "blood bank",
       "hospital",
       "units of blood",
       "unit of blood",
       "per week",
       {"St Mary",        "General",  "Children's",   "Riverside",  "University",
        "Memorial",       "Mercy",    "Sacred Heart", "Northside",  "Lakeview",
        "Good Samaritan", "Valley",   "Hillcrest",    "St Luke",    "Royal",
        "Community",      "Veterans", "Harbor",       "Pine Grove", "Westgate"},
       {"The regional blood service", "The county health board", "The Red Cross chapter",
        "The hospital trust"},
       0.5,
       {30, 150},
       10,
       false,
       "{name} Hospital"},
      {"{org} wants to serve its online customers from a few data centres. Each candidate data "
       "centre has a daily fixed cost and a limited serving capacity, and each customer region "
       "generates a steady load.",
       "data centre",
       "region",
       "million requests",
       "million requests",
       "per day",
       {"Pacific Northwest", "California", "Mountain West", "Texas", "Great Plains", "Midwest",
        "Great Lakes", "Southeast", "Florida", "Mid-Atlantic", "New England", "New York", "Ontario",
        "Quebec", "Mexico North", "Mexico South", "Caribbean", "Alaska"},
       {},
       0.2,
       {10, 60},
       2,
       true,
       "the {name} region"},
      {"{org} delivers kegs of beer to bars and is choosing which delivery depots to run next "
       "year.",
       "depot",
       "bar",
       "kegs",
       "keg",
       "per week",
       {"The Anchor",  "Red Lion",     "Crown and Kettle", "Blue Door",        "The Ferryman",
        "Old Mill",    "Golden Hind",  "Fox and Hounds",   "Hop House",        "Green Man",
        "The Lantern", "Brass Monkey", "Black Swan",       "Rose and Thistle", "The Granary",
        "Kings Head",  "Wheatsheaf",   "The Railway",      "Silver Birch",     "Copper Kettle"},
       {"Riverbend Brewing", "The Hop Yard brewery", "Old Town Ales", "Kettle Creek Brewery"},
       1.5,
       {10, 40},
       2,
       false,
       "{name}"},
      {"{org} must store this season's grain harvest of its member farms. It can rent storage "
       "silos at several locations, and every farm's harvest has to be trucked to open silos.",
       "silo",
       "farm",
       "tonnes",
       "tonne",
       "this season",
       {"Hillside Farm", "Oak Farm",    "Meadowbrook",  "Sunny Acres", "Willow Farm",
        "Stony Creek",   "Maple Farm",  "Elm Ridge",    "Clearwater",  "Brookside",
        "Fox Hollow",    "Cedar Farm",  "Golden Field", "Pine Hill",   "Mill Farm",
        "Red Barn",      "High Meadow", "Long Acre",    "Ashgrove",    "Birch Farm"},
       {"The Prairie Grain Cooperative", "The Valley Farmers Union", "Golden Plains Co-op",
        "The Northern Grain Pool"},
       0.6,
       {40, 200},
       10,
       true,
       "{name}"},
      {"{org} wants to prepare school lunches in a few central kitchens and deliver them to its "
       "schools.",
       "kitchen",
       "school",
       "meals",
       "meal",
       "per day",
       {"Lincoln Elementary", "Jefferson Middle", "Roosevelt High", "Oak Park Elementary",
        "Westside Middle", "Central High", "Maple Elementary", "Hillview Middle",
        "Riverside Elementary", "Eastwood High", "Parkside Elementary", "Northgate Middle",
        "Lakeshore Elementary", "Southfield High", "Cedar Elementary", "Valley Middle",
        "Brookfield Elementary", "Summit High"},
       {"The Maple County school district", "The Riverton unified school district",
        "The Lakeside school board", "The city education department"},
       0.1,
       {100, 400},
       10,
       false,
       "{name}"},
  };
  return t;
}

class FacilityLocationInstance : public ComposedInstance<themes> {
 public:
  std::vector<std::string> site_names, site_keys;
  std::vector<std::string> cust_names, cust_keys;
  std::vector<double> fixed;              // f_j
  std::vector<double> capacity;           // Q_j
  std::vector<double> demand;             // d_i
  std::vector<std::vector<double>> cost;  // c_{i,j}
  int max_open = 0;                       // 0 = no limit
  std::vector<std::pair<int, int>> exclusive;
  double min_throughput = 0;  // 0 = none

  size_t m() const { return site_keys.size(); }
  size_t n() const { return cust_keys.size(); }

  json size() const override {
    size_t side = exclusive.size() + (max_open > 0 ? 1 : 0) + (min_throughput > 0 ? 1 : 0);
    return {{"sites", m()}, {"customers", n()}, {"side_constraints", side}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (max_open > 0) v.push_back("max_open_sites");
    if (!exclusive.empty()) v.push_back("mutual_exclusion");
    if (min_throughput > 0) v.push_back("min_throughput");
    return v;
  }

  // "35 pallets", "1 pallet", "20 million requests"
  std::string qty(const text::Style& style, double v) const {
    return style.num(v) + " " + (v == 1 ? theme().unit_one : theme().unit);
  }
  std::string site_label(size_t j) const { return "the " + theme().site + " in " + site_names[j]; }
  std::string cust_label(size_t i) const {
    return text::fill(theme().customer_form,
                      {{"{name}", cust_names[i]}, {"{customer}", theme().customer}});
  }

  std::string compose(text::Style& style) const override {
    const Theme& th = theme();
    text::Composer text(style);
    const std::string sites = text::plural(th.site), customers = text::plural(th.customer);
    auto say = [&](const std::string& form) {
      return text::capitalize(
          text::fill(form, {{"{site}", th.site},
                            {"{sites}", sites},
                            {"{a_site}", text::article(th.site)},
                            {"{A_site}", text::capitalize(text::article(th.site))},
                            {"{customer}", th.customer},
                            {"{customers}", customers},
                            {"{a_customer}", text::article(th.customer)},
                            {"{unit}", th.unit},
                            {"{unit_one}", th.unit_one},
                            {"{period}", th.period}}));
    };
    text.fact(text::fill(th.intro, {{"{org}", org}}));
    text.fact(text::fill(
        style.pick({"There are {m} that could be opened ({slist}) and {n} to supply ({clist}).",
                    "The candidate locations for {a_site} {site} are {slist}; the {customers} to "
                    "be supplied are {clist}.",
                    "In all, {m} ({slist}) are being considered to serve {n} ({clist}).",
                    "{Sites} could be opened in {slist}, and {n} must be supplied: {clist}."}),
        {{"{m}", style.count_of(static_cast<long>(m()), "candidate " + th.site)},
         {"{n}", style.count_of(static_cast<long>(n()), th.customer)},
         {"{a_site}", text::article(th.site)},
         {"{site}", th.site},
         {"{Sites}", text::capitalize(sites)},
         {"{customers}", customers},
         {"{slist}", text::english_list(site_names)},
         {"{clist}", text::english_list(cust_names)}}));
    text.distractors(org, 1, 0.25);
    text.paragraph(false);

    // Theme layouts are a bias: a table theme shows its records as tables
    // about half the time, a prose theme as bullets or sentences.
    auto records_layout = [&]() {
      if (style.chance(0.5))
        return th.tables ? text::Layout::table
                         : style.layout({text::Layout::bullets, text::Layout::rows});
      return style.layout(
          {text::Layout::table, text::Layout::bullets, text::Layout::rows, text::Layout::columns});
    };

    // Candidate sites: fixed cost and capacity. A caption that ends in a colon
    // introduces a table or list; sentences get a sentence before them.
    const text::Layout site_layout = records_layout();
    const bool listed = site_layout == text::Layout::table || site_layout == text::Layout::bullets;
    if (listed)
      text.fact(
          say(style.pick({"The candidate {sites}, with their fixed cost and capacity {period}:",
                          "Fixed cost (in dollars {period}, paid only if the {site} is "
                          "opened) and capacity ({unit} {period}) of each candidate {site}:",
                          "Each candidate {site} has a fixed cost {period} if it is opened "
                          "and a limited capacity:"})));
    else
      text.fact(
          say(style.pick({"Each candidate {site} has a fixed cost {period}, paid only if it "
                          "is opened, and a limited capacity.",
                          "Opening {a_site} {site} costs a fixed amount {period}, and each "
                          "{site} can handle only so much."})));
    text.paragraph(false);
    text::Records site_records;
    site_records.row_header = text::capitalize(th.site);
    site_records.names = site_names;
    text::Attribute fixed_cost, site_capacity;
    fixed_cost.header = "Fixed cost ($ " + th.period + ")";
    fixed_cost.label = "fixed costs " + th.period + " in dollars";
    site_capacity.header = "Capacity (" + th.unit + " " + th.period + ")";
    site_capacity.label = "capacities in " + th.unit + " " + th.period;
    for (size_t j = 0; j < m(); ++j) {
      site_records.row_subjects.push_back(site_label(j));
      fixed_cost.cells.push_back(style.num(fixed[j]));
      fixed_cost.phrases.push_back(text::fill(
          style.pick({"costs {v} {period} to operate", "has a fixed cost of {v} {period}",
                      "would cost {v} {period} if opened"}),
          {{"{v}", style.money(fixed[j])}, {"{period}", th.period}}));
      site_capacity.cells.push_back(style.num(capacity[j]));
      site_capacity.phrases.push_back(
          text::fill(style.pick({"can handle up to {q} {period}", "has a capacity of {q} {period}",
                                 "can deliver at most {q} {period}"}),
                     {{"{q}", qty(style, capacity[j])}, {"{period}", th.period}}));
    }
    site_records.attributes.push_back(std::move(fixed_cost));
    site_records.attributes.push_back(std::move(site_capacity));
    text.block(text::render_records(style, site_layout, site_records));

    // Customers: demand.
    text::Records cust_records;
    cust_records.row_header = text::capitalize(th.customer);
    cust_records.names = cust_names;
    text::Attribute need;
    need.header = "Demand (" + th.unit + " " + th.period + ")";
    need.label = "demands in " + th.unit + " " + th.period;
    for (size_t i = 0; i < n(); ++i) {
      cust_records.row_subjects.push_back(cust_label(i));
      need.cells.push_back(style.num(demand[i]));
      need.phrases.push_back(
          text::fill(style.pick({"needs {q} {period}", "requires {q} {period}",
                                 "has a demand of {q} {period}", "must receive {q} {period}"}),
                     {{"{q}", qty(style, demand[i])}, {"{period}", th.period}}));
    }
    cust_records.attributes.push_back(std::move(need));
    const text::Layout cust_layout = records_layout();
    if (cust_layout == text::Layout::table || cust_layout == text::Layout::bullets)
      text.block(say(style.pick(
          {"Demand of each {customer} ({unit} {period}):", "What each {customer} needs {period}:",
           "The {customers} and their demand {period}:"})));
    text.block(text::render_records(style, cust_layout, cust_records));

    // Delivery costs per unit: a Markdown table (customers in rows), or one
    // line per customer listing the sites in their order.
    if (style.chance(th.tables ? 0.7 : 0.3)) {
      text.block(say(style.pick(
          {"Cost in dollars of delivering one {unit_one} from each {site} to each {customer}:",
           "Delivery cost in dollars per {unit_one}, by {customer} (rows) and {site} (columns):",
           "The table gives the cost in dollars of delivering one {unit_one} to each {customer} "
           "(rows) from each {site} (columns):"})));
      std::vector<std::string> header = {
          style.pick({text::capitalize(th.customer) + " \\ " + th.site, "To \\ from"})};
      for (const auto& s : site_names) header.push_back(s);
      std::vector<std::vector<std::string>> rows;
      for (size_t i = 0; i < n(); ++i) {
        std::vector<std::string> row = {cust_names[i]};
        for (size_t j = 0; j < m(); ++j) row.push_back(style.num(cost[i][j]));
        rows.push_back(std::move(row));
      }
      text.block(text::markdown_table(header, rows));
    } else {
      auto costs_to = [&](size_t i) {
        std::vector<std::string> parts;
        for (size_t j = 0; j < m(); ++j)
          parts.push_back(style.money(cost[i][j]) + " from " + site_names[j]);
        return text::english_list(parts);
      };
      std::string lines;
      if (style.chance(0.5)) {
        lines = say(
            style.pick({"Delivery costs per {unit_one}:\n", "Cost of delivering one {unit_one}:\n",
                        "What one {unit_one} costs to deliver:\n"}));
        const std::string bullet = style.pick({"- ", "* "});
        for (size_t i = 0; i < n(); ++i)
          lines += bullet + "To " + cust_names[i] + ": " + costs_to(i) + ".\n";
      } else {
        const std::string form = style.pick({"Delivering one {unit_one} to {c} costs {costs}.",
                                             "For {c}, the cost per {unit_one} is {costs}.",
                                             "Per {unit_one}, supplying {c} costs {costs}."});
        for (size_t i = 0; i < n(); ++i)
          lines += text::capitalize(text::fill(form, {{"{unit_one}", th.unit_one},
                                                      {"{c}", cust_label(i)},
                                                      {"{costs}", costs_to(i)}})) +
                   "\n";
      }
      text.block(lines);
    }

    text.fact(say(
        style.pick({"Every {customer}'s demand must be met in full.", "All demand has to be met.",
                    "Each {customer} must receive exactly its demand."})));
    text.fact(say(
        style.pick({"{a_customer} {customer}'s demand may be split between several open {sites}.",
                    "{a_customer} {customer} can be served by more than one open {site}.",
                    "One {customer} may receive deliveries from several {sites}, as long "
                    "as they are open."})));
    text.fact(say(style.pick({"Delivered quantities do not have to be whole numbers.",
                              "Fractional deliveries are allowed.",
                              "Amounts delivered may be fractional."})));
    text.fact(say(style.pick({"Nothing can be delivered from {a_site} {site} that is not opened.",
                              "Only open {sites} can deliver.",
                              "{A_site} {site} that stays closed delivers nothing."})));
    text.fact(
        say(style.pick({"The total delivered from {a_site} {site} may not exceed its capacity.",
                        "No {site} may deliver more than its capacity.",
                        "What {a_site} {site} sends out in total is limited by its capacity."})));
    if (max_open > 0) {
      // The limit stays in digits: it is a number of the model's data.
      const std::string k = std::to_string(max_open) + " " + (max_open == 1 ? th.site : sites);
      text.fact(
          text::fill(style.pick({"At most {k} may be opened.", "No more than {k} can be opened.",
                                 "The budget allows at most {k} to be opened."}),
                     {{"{k}", k}}));
    }
    for (auto [a, b] : exclusive)
      text.fact(text::capitalize(
          text::fill(style.pick({"the {sites} in {a} and {b} cannot both be opened.",
                                 "at most one of the {sites} in {a} and {b} may be opened.",
                                 "opening {x} rules out opening {y}, and vice versa."}),
                     {{"{sites}", sites},
                      {"{a}", site_names[static_cast<size_t>(a)]},
                      {"{b}", site_names[static_cast<size_t>(b)]},
                      {"{x}", site_label(static_cast<size_t>(a))},
                      {"{y}", site_label(static_cast<size_t>(b))}})));
    if (min_throughput > 0)
      text.fact(say(text::fill(
          style.pick({"Any {site} that is opened must deliver at least {q} {period} in total.",
                      "An open {site} has to deliver a total of at least {q} {period}.",
                      "Every open {site} must handle a total of at least {q} {period}."}),
          {{"{q}", qty(style, min_throughput)}})));
    text.distractors(org, 1, 0.2);
    text.paragraph();
    // Drawn in statement order: argument evaluation order differs between compilers.
    const std::string task =
        style.pick({"which " + sites + " to open and how to supply the " + customers,
                    "which " + sites + " to open and how much each open " + th.site +
                        " delivers to each " + th.customer,
                    "an opening and delivery plan"});
    const std::string goal =
        style.pick({"minimise the total cost " + th.period + " (fixed plus delivery)",
                    "minimise the sum of fixed and delivery costs " + th.period});
    const std::string value =
        style.pick({"the minimum total cost in dollars", "the lowest possible total cost",
                    "the optimal total cost (fixed plus delivery)"});
    text.fact(text::question(style, task, goal, value));
    return text.text();
  }

  std::string alg() const override {
    const Theme& th = theme();
    AlgebraicFormulation f("Capacitated facility location");
    f.set("$I = " + latex_set(cust_keys) + "$", th.customer + "s");
    f.set("$J = " + latex_set(site_keys) + "$", "candidate " + th.site + "s");
    f.parameter("$f_j$", "fixed cost of opening $j$ (dollars)", latex_vector(fixed));
    f.parameter("$Q_j$", "capacity of $j$ (" + th.unit + ")", latex_vector(capacity));
    f.parameter("$d_i$", "demand of $i$ (" + th.unit + ")", latex_vector(demand));
    f.parameter("$c_{i,j}$", "cost per unit delivered from $j$ to $i$ (dollars), rows $i$",
                latex_matrix(cost));
    if (max_open > 0)
      f.parameter("$K$", "maximum number of open " + th.site + "s", std::to_string(max_open));
    if (min_throughput > 0)
      f.parameter("$L$", "minimum throughput of an open " + th.site + " (" + th.unit + ")",
                  text::num(min_throughput));
    f.variable("$x_{i,j} \\ge 0$", "amount delivered from $j$ to $i$ (" + th.unit + ")");
    f.variable("$y_j \\in \\{0,1\\}$", "1 if $j$ is opened");
    f.objective(
        "\\min \\sum_{j \\in J} f_j y_j + \\sum_{i \\in I} \\sum_{j \\in J} c_{i,j} x_{i,j}",
        "Minimise fixed plus delivery cost");
    f.constraint("demand", "\\sum_{j \\in J} x_{i,j} = d_i \\quad \\forall i \\in I");
    f.constraint("capacity", "\\sum_{i \\in I} x_{i,j} \\le Q_j y_j \\quad \\forall j \\in J");
    f.constraint("link (strengthening, big-M $= d_i$)",
                 "x_{i,j} \\le d_i y_j \\quad \\forall i \\in I, j \\in J");
    if (max_open > 0) f.constraint("open limit", "\\sum_{j \\in J} y_j \\le K");
    for (auto [a, b] : exclusive)
      f.constraint("exclusion", "y_{" + latex_name(site_keys[a]) + "} + y_{" +
                                    latex_name(site_keys[b]) + "} \\le 1");
    if (min_throughput > 0)
      f.constraint("minimum throughput",
                   "\\sum_{i \\in I} x_{i,j} \\ge L y_j \\quad \\forall j \\in J");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set I;\nset J;\nparam f{J} >= 0;\nparam Q{J} >= 0;\nparam d{I} >= 0;\n"
        "param c{I, J} >= 0;\n";
    if (max_open > 0) model += "param K integer > 0;\n";
    if (min_throughput > 0) model += "param L >= 0;\n";
    model +=
        "var x{I, J} >= 0;\nvar y{J} binary;\n"
        "minimize TotalCost: sum{j in J} f[j] * y[j] + sum{i in I, j in J} c[i, j] * x[i, j];\n"
        "s.t. Demand{i in I}: sum{j in J} x[i, j] = d[i];\n"
        "s.t. Capacity{j in J}: sum{i in I} x[i, j] <= Q[j] * y[j];\n"
        "s.t. Link{i in I, j in J}: x[i, j] <= d[i] * y[j];\n";
    if (max_open > 0) model += "s.t. OpenLimit: sum{j in J} y[j] <= K;\n";
    for (size_t k = 0; k < exclusive.size(); ++k)
      model += "s.t. Exclusive" + std::to_string(k + 1) + ": y['" + site_keys[exclusive[k].first] +
               "'] + y['" + site_keys[exclusive[k].second] + "'] <= 1;\n";
    if (min_throughput > 0)
      model += "s.t. MinThroughput{j in J}: sum{i in I} x[i, j] >= L * y[j];\n";
    GmplData data;
    data.set("I", cust_keys).set("J", site_keys);
    data.param("f", site_keys, fixed).param("Q", site_keys, capacity).param("d", cust_keys, demand);
    data.param("c", cust_keys, site_keys, cost);
    if (max_open > 0) data.param("K", max_open);
    if (min_throughput > 0) data.param("L", min_throughput);
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& s) const override {
    Checker c;
    std::vector<double> y(m()), load(m());
    double objective = 0;
    for (size_t j = 0; j < m(); ++j) {
      y[j] = s.value("y", {site_keys[j]});
      c.binary(y[j], "y[" + site_keys[j] + "]");
      objective += fixed[j] * y[j];
    }
    for (size_t i = 0; i < n(); ++i) {
      double served = 0;
      for (size_t j = 0; j < m(); ++j) {
        double x = s.value("x", {cust_keys[i], site_keys[j]});
        c.ge(x, 0, "x[" + cust_keys[i] + "," + site_keys[j] + "] nonnegative");
        served += x;
        load[j] += x;
        objective += cost[i][j] * x;
      }
      c.eq(served, demand[i], "demand of " + cust_keys[i]);
    }
    int open = 0;
    for (size_t j = 0; j < m(); ++j) {
      c.le(load[j], capacity[j] * y[j], "capacity of " + site_keys[j]);
      if (min_throughput > 0) c.ge(load[j], min_throughput * y[j], "throughput of " + site_keys[j]);
      if (y[j] > 0.5) ++open;
    }
    if (max_open > 0) c.le(open, max_open, "number of open sites");
    for (auto [a, b] : exclusive)
      c.le(y[a] + y[b], 1, "exclusion " + site_keys[a] + "/" + site_keys[b]);
    return c.result(objective);
  }
};

class FacilityLocationFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "facility_location"; }
  std::string_view title() const override { return "Capacitated facility location"; }
  ProblemClass problem_class() const override { return ProblemClass::milp; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<FacilityLocationInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    // Kept small: CBC spends most of its time in root cuts on these models.
    const int m = size_for(rng, options.difficulty, {3, 3}, {4, 5}, {5, 6});
    const int n = size_for(rng, options.difficulty, {4, 6}, {5, 8}, {7, 10});
    const int planted_open = size_for(rng, options.difficulty, {2, 2}, {2, 3}, {2, 3});
    inst->org = rng.pick(th.org_pool.empty() ? text::companies() : th.org_pool);
    if (th.customer_pool.empty()) {
      auto cities = text::pick_distinct(rng, text::cities(), static_cast<size_t>(m + n));
      inst->site_names.assign(cities.begin(), cities.begin() + m);
      inst->cust_names.assign(cities.begin() + m, cities.end());
    } else {
      inst->site_names = text::pick_distinct(rng, text::cities(), static_cast<size_t>(m));
      inst->cust_names = text::pick_distinct(rng, th.customer_pool, static_cast<size_t>(n));
    }
    inst->site_keys = text::symbols(inst->site_names);
    inst->cust_keys = text::symbols(inst->cust_names);

    // Locations on a 100 x 100 map; unit costs grow with distance.
    auto point = [&] {
      return std::pair<double, double>{rng.uniform(0, 100), rng.uniform(0, 100)};
    };
    std::vector<std::pair<double, double>> site_at, cust_at;
    for (int j = 0; j < m; ++j) site_at.push_back(point());
    for (int i = 0; i < n; ++i) cust_at.push_back(point());
    double total = 0;
    for (int i = 0; i < n; ++i) {
      int steps = (th.demand.second - th.demand.first) / th.demand_step;
      double d = th.demand.first + th.demand_step * rng.uniform_int(0, steps);
      inst->demand.push_back(d);
      total += d;
      std::vector<double> row;
      for (int j = 0; j < m; ++j) {
        auto [sx, sy] = site_at[static_cast<size_t>(j)];
        auto [cx, cy] = cust_at[static_cast<size_t>(i)];
        double dist = std::hypot(sx - cx, sy - cy);
        double unit = (1 + dist / 10) * th.cost_rate;
        row.push_back(th.cost_rate >= 1 ? std::round(unit) : std::round(unit * 20) / 20);
      }
      inst->cost.push_back(row);
    }
    // Fixed costs comparable to serving a share of the demand.
    const double typical_transport = total * th.cost_rate * 5;
    for (int j = 0; j < m; ++j) {
      double f = typical_transport * rng.uniform(0.15, 0.45);
      const double grain = f >= 1000 ? 50 : 10;
      inst->fixed.push_back(std::max(grain, std::round(f / grain) * grain));
    }
    // Planted open set: capacities of S add up to >= 1.2 x total demand.
    const auto open_idx = rng.sample(static_cast<size_t>(m), static_cast<size_t>(planted_open));
    std::vector<bool> open(static_cast<size_t>(m), false);
    for (size_t j : open_idx) open[j] = true;
    const double step = th.demand_step * 2;
    for (int j = 0; j < m; ++j) {
      double share = total / planted_open;
      double q = open[static_cast<size_t>(j)] ? 1.2 * share * rng.uniform(1.0, 1.25)
                                              : share * rng.uniform(0.8, 1.4);
      inst->capacity.push_back(std::ceil(std::min(q, 0.9 * total) / step) * step);
    }
    double planted_capacity = 0;
    for (size_t j : open_idx) planted_capacity += inst->capacity[j];

    if (rng.bernoulli(options.side_constraint_rate)) inst->max_open = planted_open;
    if (rng.bernoulli(options.side_constraint_rate)) {
      const auto pair = draw_distinct_pair(rng, m, 50, [&](int a, int b) {
        return !(open[static_cast<size_t>(a)] && open[static_cast<size_t>(b)]);
      });
      if (pair) inst->exclusive.push_back(in_order(*pair));
    }
    if (rng.bernoulli(options.side_constraint_rate)) {
      // The planted split serves d_i * Q_j / Q(S) from each j in S.
      double least = total;
      for (size_t j : open_idx)
        least = std::min(least, total * inst->capacity[j] / planted_capacity);
      double floor_step = std::floor(0.5 * least / step) * step;
      if (floor_step > 0) inst->min_throughput = floor_step;
    }
    return inst;
  }
};

}  // namespace

const Family& facility_location_family() {
  static const FacilityLocationFamily family;
  return family;
}

}  // namespace trex::orlib
