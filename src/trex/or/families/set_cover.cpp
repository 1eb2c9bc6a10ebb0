// Weighted set cover / multi-cover: choose candidate sites (stations, towers,
// consultants, cameras, routes) at minimum cost so that every element is
// covered at least r_e times, with optional exclusive-pair, site-count and
// mandatory-site side constraints. IP.
//
// Generator: draws a random incidence, plants a subset of sites and repairs
// the incidence until that subset covers every element the required number of
// times; side constraints are drawn consistent with the planted subset.
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

enum class Layout { table_by_set, prose_by_set, table_by_element, prose_by_element };
enum class Pool {
  streets,
  rooftops,
  people,
  positions,
  routes,
  neighbourhoods,
  villages,
  skills,
  rooms
};

struct Theme {
  std::string intro;        // {org} is replaced
  std::string set_noun;     // "candidate site"
  std::string elem_noun;    // "district"
  std::string elem_plural;  // "districts"
  std::string cover_verb;   // "{set} covers {elements}": "can reach", "knows"
  std::string covered_by;   // "{element} is covered by {sets}": "can be reached from"
  std::string cost_name;    // "annual running cost"
  std::string cost_unit;    // "$" for money, else a unit after the number
  std::string chosen;       // past participle: "opened", "hired"
  std::string single_need;  // "within reach of at least one open station"
  std::string double_need;  // the same for r_e = 2
  std::string double_why;   // why some elements need two
  Pool set_pool, elem_pool;
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"The city council, working with {org}, must decide where to open ambulance stations so "
       "that every district can be reached within eight minutes.",
       "candidate site", "district", "districts", "can reach", "can be reached from",
       "annual running cost", "thousand dollars", "opened",
       "within reach of at least one open station", "within reach of at least two open stations",
       "because of their high call volume", Pool::streets, Pool::neighbourhoods,
       Layout::table_by_set},
      {"{org} wants to bring mobile coverage to a rural area by installing antennas on some of the "
       "available structures.",
       "structure", "village", "villages", "would cover", "would be covered by an antenna on",
       "installation cost", "thousand dollars", "used", "covered by at least one antenna",
       "covered by at least two antennas", "for redundancy, as they host clinics", Pool::rooftops,
       Pool::villages, Layout::prose_by_element},
      {"{org} is staffing a short software project and can hire freelance consultants. Every "
       "required skill must be present in the team.",
       "consultant", "skill", "skills", "knows", "is known by", "fee", "$", "hired",
       "known by at least one hired consultant", "known by at least two hired consultants",
       "as they are critical", Pool::people, Pool::skills, Layout::prose_by_set},
      {"A museum insured by {org} must place security cameras so that every room is watched.",
       "camera position", "room", "rooms", "watches", "can be watched from", "installation cost",
       "$", "used", "watched by at least one camera", "watched by at least two cameras",
       "as they hold the most valuable exhibits", Pool::positions, Pool::rooms,
       Layout::table_by_element},
      {"The county library service, sponsored by {org}, is choosing which mobile-library routes to "
       "run this season so that every village is visited.",
       "route", "village", "villages", "visits", "is visited by", "weekly operating cost", "$",
       "run", "visited by at least one route that is run",
       "visited by at least two routes that are run", "as they have large schools", Pool::routes,
       Pool::villages, Layout::prose_by_element},
  };
  return t;
}

const std::vector<std::string>& pool(Pool p) {
  static const std::vector<std::string> streets = {
      "Elm Street",      "Mill Road",     "Station Square", "Harbour Road", "King Street",
      "Park Lane",       "Church Road",   "Bridge Street",  "Market Place", "Queens Road",
      "Victoria Street", "London Road",   "High Street",    "North Road",   "South Street",
      "West Avenue",     "East Lane",     "Oak Avenue",     "Cedar Road",   "Grove Street",
      "Hill Road",       "Canal Walk",    "Castle Street",  "Abbey Road",   "Forest Road",
      "Meadow Lane",     "Spring Street", "School Lane",    "Orchard Road", "Union Street"};
  static const std::vector<std::string> rooftops = {
      "Water Tower",      "Church Spire",    "Grain Silo",     "Hotel Roof",    "Radio Hill",
      "Hospital Roof",    "Fire Lookout",    "Old Windmill",   "Stadium Mast",  "Power Pylon",
      "School Roof",      "Factory Chimney", "Farm Barn",      "Quarry Crane",  "Lighthouse",
      "Ski Lift Station", "Town Hall",       "Railway Bridge", "Hilltop Cross", "Bell Tower",
      "Motorway Gantry",  "Mall Roof"};
  static const std::vector<std::string> positions = {
      "P1",  "P2",  "P3",  "P4",  "P5",  "P6",  "P7",  "P8",  "P9",  "P10",
      "P11", "P12", "P13", "P14", "P15", "P16", "P17", "P18", "P19", "P20"};
  static const std::vector<std::string> routes = {
      "Route A", "Route B", "Route C", "Route D", "Route E", "Route F", "Route G",
      "Route H", "Route J", "Route K", "Route L", "Route M", "Route N", "Route P",
      "Route R", "Route S", "Route T", "Route U", "Route V", "Route W"};
  static const std::vector<std::string> neighbourhoods = {
      "Northgate", "Southbank",  "Eastfield",  "Westbrook",  "Hillcrest",   "Lakeside",
      "Riverside", "Oakwood",    "Maplewood",  "Cedar Park", "Pine Hill",   "Brookside",
      "Fairmont",  "Glenwood",   "Highland",   "Kingsway",   "Meadowbrook", "Old Quarter",
      "Parkview",  "Queensbury", "Rosewood",   "Stonegate",  "Elmwood",     "Windmill",
      "Ashgrove",  "Beechwood",  "Clearwater", "Dockside",   "Foxhill",     "Sunnyside"};
  static const std::vector<std::string> skills = {"Python",
                                                  "SQL",
                                                  "cloud security",
                                                  "data engineering",
                                                  "UX design",
                                                  "project management",
                                                  "machine learning",
                                                  "networking",
                                                  "mobile apps",
                                                  "DevOps",
                                                  "accessibility",
                                                  "payments",
                                                  "GDPR compliance",
                                                  "test automation",
                                                  "technical writing",
                                                  "C++",
                                                  "Java",
                                                  "Kubernetes",
                                                  "embedded systems",
                                                  "statistics",
                                                  "front-end",
                                                  "API design",
                                                  "database tuning",
                                                  "cryptography",
                                                  "agile coaching",
                                                  "Linux",
                                                  "SAP",
                                                  "GIS",
                                                  "video encoding",
                                                  "search"};
  static const std::vector<std::string> rooms = {
      "Main Hall",     "Egyptian Room", "Map Room",         "Coin Gallery",    "Sculpture Court",
      "Armour Hall",   "Print Room",    "Textile Gallery",  "Fossil Hall",     "Gem Vault",
      "Clock Room",    "Library",       "Chapel",           "Garden Room",     "Atrium",
      "Ceramics Hall", "Modern Wing",   "Photography Room", "Costume Gallery", "Instrument Room",
      "Tapestry Room", "Ship Models",   "Glass Gallery",    "Portrait Hall",   "Childrens Room",
      "Cafe",          "Museum Shop",   "Cloakroom",        "East Stair",      "West Stair"};
  switch (p) {
    case Pool::streets:
      return streets;
    case Pool::rooftops:
      return rooftops;
    case Pool::people:
      return text::people();
    case Pool::positions:
      return positions;
    case Pool::routes:
      return routes;
    case Pool::neighbourhoods:
      return neighbourhoods;
    case Pool::villages:
      return text::cities();
    case Pool::skills:
      return skills;
    case Pool::rooms:
      return rooms;
  }
  return streets;
}

class SetCoverInstance : public ThemedInstance<themes> {
 public:
  std::vector<std::string> set_names, set_keys;
  std::vector<std::string> elem_names, elem_keys;
  std::vector<double> cost;               // per set
  std::vector<int> need;                  // r_e per element
  std::vector<std::vector<bool>> covers;  // covers[s][e]
  // Optional side constraints.
  std::pair<int, int> exclusive = {-1, -1};
  int max_sets = -1;
  int mandatory = -1;

  size_t n_sets() const { return set_names.size(); }
  size_t n_elems() const { return elem_names.size(); }
  int side_count() const { return (exclusive.first >= 0) + (max_sets >= 0) + (mandatory >= 0); }
  bool multi_cover() const {
    return std::any_of(need.begin(), need.end(), [](int r) { return r > 1; });
  }
  std::string price(double v) const {
    return theme().cost_unit == "$" ? text::money(v) : text::num(v) + " " + theme().cost_unit;
  }
  std::vector<std::string> covered_elems(size_t s) const {
    std::vector<std::string> out;
    for (size_t e = 0; e < n_elems(); ++e)
      if (covers[s][e]) out.push_back(elem_names[e]);
    return out;
  }
  std::vector<std::string> covering_sets(size_t e) const {
    std::vector<std::string> out;
    for (size_t s = 0; s < n_sets(); ++s)
      if (covers[s][e]) out.push_back(set_names[s]);
    return out;
  }

  json size() const override {
    return {{"sets", n_sets()},
            {"elements", n_elems()},
            {"multi_cover", multi_cover()},
            {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v;
    if (multi_cover()) v.push_back("multi_cover");
    if (exclusive.first >= 0) v.push_back("mutual_exclusion");
    if (max_sets >= 0) v.push_back("max_count");
    if (mandatory >= 0) v.push_back("mandatory_set");
    return v;
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = replace_all(th.intro, "{org}", org) + " ";
    out += "There are " + std::to_string(n_sets()) + " " + th.set_noun + "s and " +
           std::to_string(n_elems()) + " " + th.elem_plural + ".\n\n";
    switch (th.layout) {
      case Layout::table_by_set: {
        std::vector<std::vector<std::string>> rows;
        for (size_t s = 0; s < n_sets(); ++s)
          rows.push_back({set_names[s], text::num(cost[s]), join(covered_elems(s), ", ")});
        out += text::markdown_table({text::capitalize(th.set_noun),
                                     text::capitalize(th.cost_name) + " (" + th.cost_unit + ")",
                                     text::capitalize(th.elem_plural) + " it " + th.cover_verb},
                                    rows) +
               "\n";
        break;
      }
      case Layout::prose_by_set:
        for (size_t s = 0; s < n_sets(); ++s)
          out += "- " + set_names[s] + " (" + th.cost_name + " " + price(cost[s]) + ") " +
                 th.cover_verb + " " + text::english_list(covered_elems(s)) + ".\n";
        out += "\n";
        break;
      case Layout::table_by_element: {
        std::vector<std::vector<std::string>> rows;
        for (size_t e = 0; e < n_elems(); ++e)
          rows.push_back({elem_names[e], join(covering_sets(e), ", ")});
        out += text::markdown_table(
                   {text::capitalize(th.elem_noun), text::capitalize(th.covered_by)}, rows) +
               "\n";
        std::vector<std::string> prices;
        for (size_t s = 0; s < n_sets(); ++s) prices.push_back(set_names[s] + " " + price(cost[s]));
        out += "The " + th.cost_name + " of each " + th.set_noun +
               " is: " + text::english_list(prices) + ".\n\n";
        break;
      }
      case Layout::prose_by_element: {
        std::vector<std::string> prices;
        for (size_t s = 0; s < n_sets(); ++s) prices.push_back(set_names[s] + " " + price(cost[s]));
        out += "The " + th.cost_name + " of each " + th.set_noun +
               " is: " + text::english_list(prices) + ".\n\n";
        for (size_t e = 0; e < n_elems(); ++e)
          out += "- " + elem_names[e] + " " + th.covered_by + " " +
                 text::english_list(covering_sets(e), "or") + ".\n";
        out += "\n";
        break;
      }
    }
    std::vector<std::string> doubles;
    for (size_t e = 0; e < n_elems(); ++e)
      if (need[e] > 1) doubles.push_back(elem_names[e]);
    out += "Every " + th.elem_noun + " must be " + th.single_need + ". ";
    if (!doubles.empty())
      out += text::capitalize(th.double_why) + ", " + text::english_list(doubles) +
             (doubles.size() == 1 ? " must be " : " must each be ") + th.double_need + ". ";
    if (exclusive.first >= 0)
      out += set_names[static_cast<size_t>(exclusive.first)] + " and " +
             set_names[static_cast<size_t>(exclusive.second)] + " cannot both be " + th.chosen +
             ". ";
    if (max_sets >= 0)
      out += "At most " + std::to_string(max_sets) + " " + th.set_noun + "s may be " + th.chosen +
             ". ";
    if (mandatory >= 0)
      out += set_names[static_cast<size_t>(mandatory)] + " has already been promised and must be " +
             th.chosen + ". ";
    out += "Each " + th.set_noun + " is either " + th.chosen +
           " or not (no partial choices). "
           "Which " +
           th.set_noun + "s should be " + th.chosen + " to minimise the total " + th.cost_name +
           ", and what is that minimum?";
    return out;
  }

  std::string alg() const override {
    AlgebraicFormulation f(multi_cover() ? "Weighted set multi-cover" : "Weighted set cover");
    std::vector<std::vector<double>> a(n_elems(), std::vector<double>(n_sets(), 0.0));
    for (size_t s = 0; s < n_sets(); ++s)
      for (size_t e = 0; e < n_elems(); ++e) a[e][s] = covers[s][e] ? 1 : 0;
    std::vector<double> r(need.begin(), need.end());
    f.set("$S = " + latex_set(set_keys) + "$", theme().set_noun + "s");
    f.set("$E = " + latex_set(elem_keys) + "$", theme().elem_plural);
    f.parameter("$c_s$", theme().cost_name + " of $s$ (" + theme().cost_unit + ")",
                latex_vector(cost));
    f.parameter("$a_{e,s}$", "1 if $s$ " + theme().cover_verb + " $e$ (rows $e$, columns $s$)",
                latex_matrix(a));
    f.parameter("$r_e$", "required number of covers of $e$", latex_vector(r));
    f.variable("$x_s \\in \\{0,1\\}$", "1 if $s$ is chosen");
    f.objective("\\min \\sum_{s \\in S} c_s x_s", "Minimise the total " + theme().cost_name);
    f.constraint("cover", "\\sum_{s \\in S} a_{e,s} x_s \\ge r_e \\quad \\forall e \\in E");
    if (exclusive.first >= 0)
      f.constraint("exclusion",
                   "x_{" + latex_name(set_keys[static_cast<size_t>(exclusive.first)]) + "} + x_{" +
                       latex_name(set_keys[static_cast<size_t>(exclusive.second)]) + "} \\le 1");
    if (max_sets >= 0)
      f.constraint("count limit", "\\sum_{s \\in S} x_s \\le " + std::to_string(max_sets));
    if (mandatory >= 0)
      f.constraint("mandatory",
                   "x_{" + latex_name(set_keys[static_cast<size_t>(mandatory)]) + "} = 1");
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "set SETS;\nset ELEMS;\nset COVERS within SETS cross ELEMS;\n"
        "param cost{SETS} >= 0;\nparam need{ELEMS} >= 0, integer;\n"
        "var x{SETS} binary;\n"
        "minimize TotalCost: sum{s in SETS} cost[s] * x[s];\n"
        "s.t. Cover{e in ELEMS}: sum{(s, f) in COVERS: f = e} x[s] >= need[e];\n";
    if (exclusive.first >= 0)
      model += "s.t. Exclusive: x['" + set_keys[static_cast<size_t>(exclusive.first)] + "'] + x['" +
               set_keys[static_cast<size_t>(exclusive.second)] + "'] <= 1;\n";
    if (max_sets >= 0)
      model += "s.t. MaxCount: sum{s in SETS} x[s] <= " + std::to_string(max_sets) + ";\n";
    if (mandatory >= 0)
      model += "s.t. Mandatory: x['" + set_keys[static_cast<size_t>(mandatory)] + "'] = 1;\n";
    std::vector<std::vector<std::string>> pairs;
    for (size_t s = 0; s < n_sets(); ++s)
      for (size_t e = 0; e < n_elems(); ++e)
        if (covers[s][e]) pairs.push_back({set_keys[s], elem_keys[e]});
    GmplData data;
    data.set("SETS", set_keys).set("ELEMS", elem_keys).set_of_tuples("COVERS", pairs);
    data.param("cost", set_keys, cost)
        .param("need", elem_keys, std::vector<double>(need.begin(), need.end()));
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& sol) const override {
    Checker c;
    std::vector<double> x(n_sets());
    double objective = 0, count = 0;
    for (size_t s = 0; s < n_sets(); ++s) {
      x[s] = sol.value("x", {set_keys[s]});
      c.binary(x[s], "x[" + set_keys[s] + "]");
      objective += cost[s] * x[s];
      count += x[s];
    }
    for (size_t e = 0; e < n_elems(); ++e) {
      double covered = 0;
      for (size_t s = 0; s < n_sets(); ++s)
        if (covers[s][e]) covered += x[s];
      c.ge(covered, need[e], "cover of " + elem_keys[e]);
    }
    if (exclusive.first >= 0)
      c.le(x[static_cast<size_t>(exclusive.first)] + x[static_cast<size_t>(exclusive.second)], 1,
           "exclusion");
    if (max_sets >= 0) c.le(count, max_sets, "count limit");
    if (mandatory >= 0) c.eq(x[static_cast<size_t>(mandatory)], 1, "mandatory choice");
    return c.result(objective);
  }
};

class SetCoverFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "set_cover"; }
  std::string_view title() const override { return "Weighted set cover / multi-cover"; }
  ProblemClass problem_class() const override { return ProblemClass::ip; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<SetCoverInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    inst->org = rng.pick(text::companies());
    const size_t ns =
        static_cast<size_t>(size_for(rng, options.difficulty, {5, 7}, {8, 12}, {13, 18}));
    const size_t ne =
        static_cast<size_t>(size_for(rng, options.difficulty, {6, 9}, {10, 15}, {16, 22}));
    // Multi-cover (some elements need two covers) is more common when harder.
    const double multi = options.difficulty == Difficulty::easy     ? 0.3
                         : options.difficulty == Difficulty::medium ? 0.5
                                                                    : 0.65;
    const double double_rate = rng.bernoulli(multi) ? rng.uniform(0.15, 0.3) : 0.0;
    if (th.set_pool == Pool::positions) {  // numbered positions: the first ns, in order
      const auto& positions = pool(th.set_pool);
      inst->set_names.assign(positions.begin(), positions.begin() + static_cast<long>(ns));
    } else {
      inst->set_names = text::pick_distinct(rng, pool(th.set_pool), ns);
      if (th.set_pool == Pool::routes) std::sort(inst->set_names.begin(), inst->set_names.end());
    }
    inst->set_keys = text::symbols(inst->set_names);
    inst->elem_names = text::pick_distinct(rng, pool(th.elem_pool), ne);
    inst->elem_keys = text::symbols(inst->elem_names);

    // Random incidence, each set covering at least two elements.
    auto& covers = inst->covers;
    covers.assign(ns, std::vector<bool>(ne, false));
    const double density = rng.uniform(0.18, 0.3);
    for (size_t s = 0; s < ns; ++s) {
      for (size_t e = 0; e < ne; ++e) covers[s][e] = rng.bernoulli(density);
      while (std::count(covers[s].begin(), covers[s].end(), true) < 2)
        covers[s][rng.index(ne)] = true;
    }
    for (size_t e = 0; e < ne; ++e) inst->need.push_back(rng.bernoulli(double_rate) ? 2 : 1);
    // Planted choice: about half of the sets; repair the incidence until it
    // covers every element as often as required.
    std::vector<size_t> planted = rng.sample(ns, std::max<size_t>(2, (ns + 1) / 2));
    std::vector<bool> chosen(ns, false);
    for (size_t s : planted) chosen[s] = true;
    for (size_t e = 0; e < ne; ++e) {
      int covered = 0;
      for (size_t s : planted) covered += covers[s][e] ? 1 : 0;
      std::vector<size_t> order = planted;
      rng.shuffle(order);
      for (size_t s : order) {
        if (covered >= inst->need[e]) break;
        if (!covers[s][e]) {
          covers[s][e] = true;
          ++covered;
        }
      }
    }
    // Costs grow with coverage but with noise, so greedy choices are not optimal.
    const double scale = th.cost_unit == "$" ? 10.0 : 1.0;  // dollars vs thousand dollars
    for (size_t s = 0; s < ns; ++s) {
      const double size = static_cast<double>(std::count(covers[s].begin(), covers[s].end(), true));
      inst->cost.push_back(scale *
                           std::round(10 * (rng.uniform(2.0, 5.0) + size * rng.uniform(1.0, 2.5))));
    }

    // Optional side constraints, consistent with the planted choice.
    if (rng.bernoulli(options.side_constraint_rate)) {
      const auto pair = draw_distinct_pair(
          rng, ns, 50, [&](size_t a, size_t b) { return !(chosen[a] && chosen[b]); });
      if (pair) {
        const auto [a, b] = in_order(*pair);
        inst->exclusive = {static_cast<int>(a), static_cast<int>(b)};
      }
    }
    if (rng.bernoulli(options.side_constraint_rate))
      inst->max_sets = static_cast<int>(planted.size());
    if (rng.bernoulli(options.side_constraint_rate))
      inst->mandatory = static_cast<int>(rng.pick(planted));
    return inst;
  }
};

}  // namespace

const Family& set_cover_family() {
  static const SetCoverFamily family;
  return family;
}

}  // namespace trex::orlib
