#include "trex/or/eval/bench_types.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>

#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/eval/bench.hpp"

namespace trex::orlib::eval {
namespace {

// Indices into problem_types().
enum class T {
  resource_allocation,
  blending,
  diet,
  transportation,
  assignment,
  production_inventory,
  lot_sizing,
  staffing,
  investment,
  portfolio_risk,
  knapsack,
  bin_packing_cutting,
  facility_location,
  network_flow,
  network_design,
  routing,
  scheduling,
  set_covering,
  unit_commitment,
  algebraic,
  other,
};
constexpr size_t kTypes = static_cast<size_t>(T::other) + 1;

// Ties between rule totals go to the first of these: the specific kinds of
// model before the general ones whose cues they share (lot sizing mentions
// inventory; a facility location text reads like a transportation one).
constexpr std::array kPriority = {
    T::algebraic,
    T::lot_sizing,
    T::unit_commitment,
    T::network_design,
    T::facility_location,
    T::routing,
    T::scheduling,
    T::set_covering,
    T::bin_packing_cutting,
    T::portfolio_risk,
    T::blending,
    T::diet,
    T::staffing,
    T::production_inventory,
    T::investment,
    T::assignment,
    T::network_flow,
    T::transportation,
    T::knapsack,
    T::resource_allocation,
    T::other,
};

// A rule adds `weight` to its type's total when each group has a cue in the
// text. A cue is `|`-separated in its group; it matches at the start of a word
// and may end inside one ("invest" matches "investment"; a trailing space ends
// the word); "a .* b" matches a, then b within 20 characters.
struct Rule {
  T type;
  int weight;
  std::vector<std::string> groups;
};

// Several periods ahead: what separates multi-period planning from a one-period
// mix that happens to say "per week".
const std::string kPeriods =
    "month 1|period 1|quarter 1|week 1|year 1|first month|january|first quarter|following month "
    "|next month |next quarter |following quarter |planning horizon|multi-period|next .* "
    "months|next .* quarters|next .* weeks|next .* periods|over .* months|over .* periods|over .* "
    "weeks|over .* quarters|-month period|-period|-week period|each of the .* months|each of the "
    ".* periods|each of the .* weeks|at the end of each|beginning of each|end of month|per period";
const std::string kPeople =
    "nurse|staff|worker|employee|driver|waiter|clerk|salespeople|salesperson|personnel|operator|"
    "officer|crew|guard|agent|attendant|student|doctor|teacher|people|person";
// Requirements by time of day or day of week: shift scheduling, not a mix of worker kinds.
const std::string kTimesOfDay =
    "time period|each period|time slot|:00|00-|around the clock|24 hours|24-hour|each day of the "
    "week|days of the week|monday|consecutive|start work|starting time|start their shift|begin "
    "work|days off|hours of the day";

const std::vector<Rule>& rules() {
  static const std::vector<Rule> r = {
      // diet
      {T::diet, 3, {"diet"}},
      {T::diet,
       2,
       {"nutri|vitamin|calorie|protein|carbohydrate|fiber |minerals|folate|iron "
        "|calcium|sodium|fat "}},
      {T::diet, 1, {"food|meal|feed |feeds |eat |eats |drink|juice|pill|supplement|dietitian"}},
      // blending
      {T::blending, 3, {"blend|octane|alloy"}},
      {T::blending,
       2,
       {"mix |mixes |mixed |mixing|mixture|combine",
        "content|proportion|percentage|concentration|% "}},
      {T::blending,
       2,
       {"raw material|crude|ingredient|ore |ores ",
        "content of|sulfur|sulphur|quality|grade|percent|proportion"}},
      // transportation
      {T::transportation, 3, {"transportation problem|transshipment|trans-shipment"}},
      {T::transportation,
       2,
       {"supplier|origin|warehouse|plant|factory|factories|production point|source|mine |mines "
        "|coal yard|depot",
        "destination|customer|retail|store|market|sales point|demand point|residential "
        "area|city|cities|port|ports",
        "ship|transport|deliver|supply|send",
        "cost per|per unit|per ton|per container|unit cost|distance|freight|rate|cost "
        "of|kilomet|km |mile"}},
      {T::transportation,
       1,
       {"per unit shipped|shipping cost|transportation cost|transport cost|cost of shipping|unit "
        "transportation|cost per unit of transport|freight"}},
      // assignment
      {T::assignment, -1, {"allocat"}},
      {T::assignment,
       3,
       {"assignment problem|assign each|assigned to exactly one|each worker|each employee is "
        "assigned|one task|one job|exactly one task|assign participants|assign aircraft|exactly "
        "one project"}},
      {T::assignment,
       2,
       {"assign",
        "worker|employee|person|staff|candidate|participant|machine|team|crew|people|factory|"
        "factories",
        "task|job|project|shift|car |cars |route|machine|location"}},
      // production_inventory
      {T::production_inventory,
       3,
       {"inventory|in stock|stock on hand|holding cost|storage cost|storage fee|carried over|carry "
        "over|carried forward|backlog|stored|storing|warehouse capacity|end of each|leftover|left "
        "over",
        kPeriods}},
      {T::production_inventory,
       2,
       {"regular time|overtime|hire|hiring|layoff|lay off|workforce|fire ", kPeriods,
        "demand|requirement|orders"}},
      {T::production_inventory, 1, {kPeriods}},
      {T::production_inventory, 1, {"purchase|purchasing|buy", "sell|sales", kPeriods}},
      // lot_sizing
      {T::lot_sizing, 3, {"lot siz|lot-siz|economic order"}},
      {T::lot_sizing,
       5,
       {"setup cost|set-up cost|setup costs|production setup|ordering cost|order cost|fixed "
        "ordering|production run|setup decision",
        "inventory|holding", "period|month|week"}},
      // staffing
      {T::staffing, 3, {"shift|roster|rota |duty|on duty|work schedule", kPeople, kTimesOfDay}},
      {T::staffing,
       2,
       {"minimum number of|number of .* required|required in each|needed in "
        "each|requirement|required",
        kPeople, kTimesOfDay}},
      {T::staffing,
       3,
       {"employees to shifts|staff to shifts|workers to shifts|shift assignment|shifts per "
        "day|nurse schedul|nurse roster|crew schedul|staff schedul|workforce schedul"}},
      // investment
      {T::investment, 1, {"invest|investor"}},
      {T::investment,
       3,
       {"to invest|amount invested|money invested|invest in his|invest in her|invest in their"}},
      {T::investment,
       3,
       {"invest|investor|financial advisor",
        "rate of return|return on|returns|return from|return of|expected return|interest|annual "
        "yield|dividend|stocks|bonds|securities|real estate|properties|annual "
        "income|principal|shares|mutual fund|deposit"}},
      {T::investment,
       2,
       {"fund|capital|money|cash|savings|retirement|yuan|dollars",
        "rate of return|interest rate|annual return|return rate|dividend|% return|percent "
        "return|annual interest|per annum|principal and interest"}},
      {T::investment,
       2,
       {"stocks|bonds|mutual fund|securities|real estate|certificate of deposit|treasury|stock "
        "market",
        "return|interest|yield|dividend|invest|portfolio"}},
      // portfolio_risk
      {T::portfolio_risk,
       4,
       {"variance|covariance|standard deviation|mean absolute deviation|value at "
        "risk|cvar|downside risk",
        "return|portfolio|asset|invest|stock"}},
      // knapsack
      {T::knapsack, 4, {"knapsack"}},
      {T::knapsack,
       2,
       {"select|choose|whether to|which of|take|pick",
        "item|candidate|project|children|course|proposal|option|artwork|painting|objects",
        "value|budget|capacity|weight|cost|revenue|salary"}},
      {T::knapsack, 1, {"binary|0-1|0/1|yes/no|either selected"}},
      // bin_packing_cutting
      {T::bin_packing_cutting,
       4,
       {"bin packing|cutting stock|cutting pattern|cutting plan|trim loss"}},
      {T::bin_packing_cutting,
       3,
       {"cut|cutting|cuts",
        "roll|rolls|bar |bars |pipe|board|sheet|raw steel|length|width|pattern"}},
      {T::bin_packing_cutting,
       3,
       {"bin |bins |container|containers|box |boxes|parking|street", "pack|packing|both sides",
        "fewest|minimum number of|least number of|minimize the number|minimize the total length|as "
        "few"}},
      // facility_location
      {T::facility_location,
       4,
       {"facility location|p-median|p-center|dispersion|placement of facilities|host "
        "facilities|host a facility|response center|minimum distance between"}},
      {T::facility_location,
       3,
       {"open|opening|establish|build|locate|select|choose|site",
        "distribution "
        "center|warehouse|facility|facilities|plant|depot|center|centre|store|stores|station|site|"
        "location",
        "fixed|opening cost|setup|cost of opening|construction cost",
        "customer|store|demand|retail|serve|region|district|residential|city"}},
      {T::facility_location,
       2,
       {"potential location|candidate site|candidate location|potential site|which locations|where "
        "to open|where to locate|where to build"}},
      // network_flow
      {T::network_flow,
       4,
       {"maximum flow|max flow|max-flow|shortest path|shortest route|minimum cost flow|min-cost "
        "flow|minimum spanning|spanning tree"}},
      {T::network_flow,
       2,
       {"bandwidth|bottleneck|maximum amount|maximum volume|maximum number of",
        "node|nodes|hub|hubs|junction|vertex|vertices|from city|between any two"}},
      {T::network_flow,
       2,
       {"node|nodes|hub|hubs|junction|vertex|vertices",
        "arc|arcs|edge|edges|link|links|connection|connections|road|roads|pipe|pipes|channel|route|"
        "routes|tunnel|capacity"}},
      {T::network_flow,
       2,
       {"interconnected cities|network of cities|between cities|across cities",
        "supply|demand|surplus|transport"}},
      {T::network_flow, 1, {"source|sink|flow|flows|throughput|destination node"}},
      {T::network_flow,
       3,
       {"currently has|currently holds|starts with|begins with|there are "
        "currently|currently|surplus|excess|has a supply|units but needs|but needs|but requires",
        "need|needs|requires|required|deficit|shortage|demand",
        "cost of moving|cost of transport|transportation between|cost matrix|to move|moving "
        "a|transfer|cost of shipping|transporting"}},
      {T::network_flow,
       3,
       {"source", "capacit|maximum amount|maximum data",
        "send|sent|transfer|flow|can carry|directed"}},
      // network_design
      {T::network_design,
       4,
       {"network design|transit line|design a public transit|designing a public transit|fixed "
        "charge network|fixed-charge network"}},
      {T::network_design,
       3,
       {"build|construct|establish|open|install|lay",
        "link|links|road|roads|line|lines|pipeline|pipelines|cable|cables|arc|arcs|edge|edges",
        "fixed cost|construction cost|cost of building|installation cost|building cost|fixed "
        "charge"}},
      // routing
      {T::routing, 5, {"salesman problem|tsp |vehicle routing|vrp "}},
      {T::routing, 3, {"salesman", "visit", "city|cities|customers|locations"}},
      {T::routing,
       3,
       {"visit|visits|visited|deliver",
        "exactly once|each city once|each of the cities once|return to|returning to|back "
        "to|starting and ending|start and end|same city"}},
      {T::routing, 2, {"route|routes|tour|trip", "depot", "vehicle|truck|van|capacity"}},
      // scheduling
      {T::scheduling,
       4,
       {"makespan|job shop|job-shop|flow shop|flowshop|tardiness|lateness|landing time|aircraft "
        "landing|critical path|project network|earliest start"}},
      {T::scheduling,
       3,
       {"job|jobs|operation|operations|batch|batches|task|tasks|activities|activity",
        "machine|machines|vat|vats|processor|processors|precedence|immediate predecessor",
        "processing time|completion time|start time|finish time|duration|sequence|processing "
        "order|in order"}},
      {T::scheduling,
       2,
       {"product|products|batch|batches",
        "first on machine|then on machine|then sequentially|processing order|same order|in the "
        "order"}},
      {T::scheduling,
       2,
       {"schedul|sequenc", "job|jobs|operation|aircraft|landing|activit",
        "machine|precedence|runway|duration|predecessor|processing time"}},
      // set_covering
      {T::set_covering,
       4,
       {"set cover|set covering|covering problem|maximal covering|maximum coverage|max coverage"}},
      {T::set_covering,
       3,
       {"cover|covers|covered|coverage|within reach|within range|served by",
        "tower|station|site|location|facility|facilities|camera|sensor|ambulance|build|open|select|"
        "choose|whether|media|outlet",
        "at least one|each area|every area|each region|every region|each district|all areas|all "
        "regions|all neighborhoods|population|each neighborhood|audience|every district|each "
        "zone|all zones|each city|every city|each customer|each community"}},
      {T::set_covering,
       3,
       {"radius|within a distance|within .* minutes|within .* km|within .* m |not exceed .* m ",
        "build|open|locate|place|station|store|center|centre",
        "minimum number|fewest|least number|minimize the number|smallest number"}},
      {T::set_covering, 1, {"tower|station|camera|sensor|fire station|ambulance|emergency"}},
      // unit_commitment
      {T::unit_commitment,
       4,
       {"unit commitment|power generation|generating unit|generating units|thermal unit"}},
      {T::unit_commitment,
       3,
       {"generator|generators|power plant|power plants|turbine|turbines",
        "mw|megawatt|demand|load|electricity|power",
        "startup|start-up|period|hour|minimum output|operate|on or off"}},
      // algebraic
      {T::algebraic, 4, {"x[0]|x_0 |x_{0}|x_1 and x_2"}},
      {T::algebraic,
       3,
       {"linear objective|equality constraint|second-order cone|socp|free to take any real "
        "value|first decision variable",
        "coefficient|times"}},
  };
  return r;
}

// An optimisation goal without a more specific cue: a plain allocation LP.
const char* const kGeneric[] = {"maximi",  "minimi",  "how many", "how much", "profit",   "cost",
                                "optimal", "at most", "at least", "allocate", "objective"};

// Lower case; characters other than letters, digits and []%-.'_: become spaces;
// runs of spaces collapse; one space on each side, so a cue may end with one.
std::string normalise(std::string_view question) {
  const std::string text = replace_all(std::string(question), "\\n", " ");  // escaped newlines
  std::string out = " ";
  for (unsigned char c : text) {
    char k = static_cast<char>(std::tolower(c));
    const bool keep = (c < 128 && std::isalnum(c)) ||
                      std::string_view("[]%-.'_:").find(k) != std::string_view::npos;
    if (!keep) k = ' ';
    if (k == ' ' && out.back() == ' ') continue;
    out += k;
  }
  if (out.back() != ' ') out += ' ';
  return out;
}

bool word_start(const std::string& text, size_t i) {
  return i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1]));
}

bool has_cue(const std::string& text, std::string_view cue) {
  const size_t gap = cue.find(".*");
  const std::string_view head = gap == std::string_view::npos ? cue : cue.substr(0, gap);
  for (size_t i = text.find(head); i != std::string::npos; i = text.find(head, i + 1)) {
    if (!word_start(text, i)) continue;
    if (gap == std::string_view::npos) return true;
    const std::string_view tail = cue.substr(gap + 2);
    const size_t from = i + head.size();
    const std::string_view window =
        std::string_view(text).substr(from, std::min(text.size() - from, 20 + tail.size()));
    if (window.find(tail) != std::string_view::npos) return true;
  }
  return false;
}

// The rules with each group split into its cues, once.
struct SplitRule {
  T type;
  int weight;
  std::vector<std::vector<std::string>> groups;
};
const std::vector<SplitRule>& split_rules() {
  static const std::vector<SplitRule> out = [] {
    std::vector<SplitRule> v;
    for (const Rule& r : rules()) {
      SplitRule s{r.type, r.weight, {}};
      for (const std::string& g : r.groups) s.groups.push_back(split(g, '|'));
      v.push_back(std::move(s));
    }
    return v;
  }();
  return out;
}

std::array<int, kTypes> scores(const std::string& text) {
  std::array<int, kTypes> total{};
  for (const SplitRule& rule : split_rules()) {
    bool all = true;
    for (const auto& group : rule.groups) {
      all = std::any_of(group.begin(), group.end(),
                        [&](const std::string& cue) { return has_cue(text, cue); });
      if (!all) break;
    }
    if (all) total[static_cast<size_t>(rule.type)] += rule.weight;
  }
  return total;
}

T classify(std::string_view question) {
  const std::string text = normalise(question);
  const std::array<int, kTypes> total = scores(text);
  const int best = *std::max_element(total.begin(), total.end());
  if (best >= 2)
    for (T t : kPriority)
      if (total[static_cast<size_t>(t)] == best) return t;
  for (const char* cue : kGeneric)
    if (has_cue(text, cue)) return T::resource_allocation;
  return T::other;
}

}  // namespace

const std::vector<ProblemType>& problem_types() {
  static const std::vector<ProblemType> types = {
      {"resource_allocation", "Product mix / resource allocation", {"product_mix"}},
      // The diet family's blending themes write quality bounds as ratio constraints.
      {"blending", "Blending (quality or percentage specs)", {"diet"}},
      {"diet", "Diet (nutrient requirements)", {"diet"}},
      {"transportation",
       "Transportation (supplies to demands)",
       {"transportation", "logical_transport"}},
      {"assignment", "Assignment / matching", {"assignment"}},
      // lot_sizing plans one item with setup costs, not several products sharing capacity.
      {"production_inventory",
       "Multi-period production / purchasing with inventory",
       {"production_inventory"}},
      {"lot_sizing", "Lot sizing (setup costs over periods)", {"lot_sizing"}},
      {"staffing", "Staffing with shifts", {"shift_scheduling"}},
      // portfolio minimises a risk measure; these maximise return under budget and ratio limits.
      {"investment", "Investment allocation (returns, ratios)", {"investment_allocation"}},
      {"portfolio_risk", "Portfolio with a risk measure", {"portfolio"}},
      {"knapsack", "Selection / knapsack", {"knapsack"}},
      {"bin_packing_cutting", "Bin packing / cutting stock", {"bin_packing", "cutting_stock"}},
      {"facility_location", "Facility location", {"facility_location", "p_median"}},
      {"network_flow",
       "Network flow (min-cost, max flow, shortest path)",
       {"min_cost_flow", "max_flow", "shortest_path"}},
      {"network_design", "Network design (fixed-charge links)", {"fixed_charge_network"}},
      {"routing", "Routing (TSP, VRP)", {"tsp", "cvrp"}},
      {"scheduling", "Machine / job scheduling", {"job_shop"}},
      {"set_covering", "Set covering", {"set_cover"}},
      {"unit_commitment", "Unit commitment / energy", {"unit_commitment"}},
      // Coefficients of x[0], x[1], ... stated in words: a style, not a kind of model.
      {"algebraic", "Algebraic LP without a story", {}},
      {"other", "Other", {}},
  };
  return types;
}

const ProblemType& problem_type(std::string_view id) {
  for (const ProblemType& t : problem_types())
    if (t.id == id) return t;
  throw Error("unknown problem type '" + std::string(id) + "'");
}

std::string classify_question(std::string_view question) {
  return problem_types()[static_cast<size_t>(classify(question))].id;
}

std::vector<std::pair<std::string, int>> question_type_scores(std::string_view question) {
  const std::array<int, kTypes> total = scores(normalise(question));
  std::vector<std::pair<std::string, int>> out;
  for (size_t t = 0; t < kTypes; ++t)
    if (total[t] != 0) out.emplace_back(problem_types()[t].id, total[t]);
  return out;
}

nlohmann::json bench_types_report(const BenchTypesOptions& o) {
  if (o.files.empty()) throw Error("no benchmark files named").field("--files");
  if (o.sample < 0) throw Error("must be non-negative").field("--sample");
  std::vector<std::string> paths;
  for (const std::string& f : o.files) paths.push_back(o.bench_dir + "/" + f + ".jsonl");
  const std::vector<Benchmark> benches = load_benchmarks(paths);

  struct Item {
    size_t file;
    const BenchItem* item;
    T type;
  };
  std::vector<Item> items;
  for (size_t b = 0; b < benches.size(); ++b)
    for (const BenchItem& it : benches[b].items) items.push_back({b, &it, classify(it.question)});

  // The sample: k distinct items of the pooled files, in file order.
  std::vector<size_t> chosen;
  const bool all = o.sample == 0 || static_cast<size_t>(o.sample) >= items.size();
  if (all) {
    for (size_t i = 0; i < items.size(); ++i) chosen.push_back(i);
  } else {
    Rng rng(o.seed, {hash_string("bench-types")});
    chosen = rng.sample(items.size(), static_cast<size_t>(o.sample));
    std::sort(chosen.begin(), chosen.end());
  }

  std::array<int64_t, kTypes> count{}, all_count{};
  std::vector<int64_t> sampled(benches.size(), 0);
  for (const Item& it : items) ++all_count[static_cast<size_t>(it.type)];
  nlohmann::json classified = nlohmann::json::array();
  for (size_t i : chosen) {
    ++count[static_cast<size_t>(items[i].type)];
    ++sampled[items[i].file];
    classified.push_back({{"file", benches[items[i].file].name},
                          {"id", items[i].item->id},
                          {"type", problem_types()[static_cast<size_t>(items[i].type)].id}});
  }

  nlohmann::json files = nlohmann::json::array();
  for (size_t b = 0; b < benches.size(); ++b)
    files.push_back(
        {{"name", benches[b].name}, {"items", benches[b].items.size()}, {"sampled", sampled[b]}});
  std::vector<size_t> order(kTypes);
  for (size_t t = 0; t < kTypes; ++t) order[t] = t;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return count[a] != count[b] ? count[a] > count[b] : all_count[a] > all_count[b];
  });
  const double n = static_cast<double>(chosen.size());
  nlohmann::json types = nlohmann::json::array();
  nlohmann::json uncovered = nlohmann::json::array();
  int64_t covered = 0;
  for (size_t t : order) {
    const ProblemType& p = problem_types()[t];
    const bool is_covered = !p.families.empty();
    if (is_covered)
      covered += count[t];
    else if (count[t] > 0 && p.id != "other" && p.id != "algebraic")
      uncovered.push_back(p.id);
    types.push_back({{"id", p.id},
                     {"title", p.title},
                     {"count", count[t]},
                     {"share", n > 0 ? static_cast<double>(count[t]) / n : 0.0},
                     {"all_count", all_count[t]},
                     {"families", p.families},
                     {"covered", is_covered}});
  }
  return {
      {"files", files},          {"items", items.size()},
      {"sample", chosen.size()}, {"seed", o.seed},
      {"types", types},          {"covered_share", n > 0 ? static_cast<double>(covered) / n : 0.0},
      {"uncovered", uncovered},  {"classified", classified}};
}

std::string format_bench_types(const nlohmann::json& r) {
  std::string out;
  char line[512];
  for (const auto& f : r["files"]) {
    std::snprintf(line, sizeof line, "%-28s %5lld items, %4lld sampled\n",
                  f["name"].get<std::string>().c_str(),
                  static_cast<long long>(f["items"].get<int64_t>()),
                  static_cast<long long>(f["sampled"].get<int64_t>()));
    out += line;
  }
  std::snprintf(line, sizeof line, "\n%-22s %6s %7s %6s  %s\n", "type", "count", "share", "all",
                "families");
  out += line;
  for (const auto& t : r["types"]) {
    std::vector<std::string> fams = t["families"].get<std::vector<std::string>>();
    std::snprintf(
        line, sizeof line, "%-22s %6lld %6.1f%% %6lld  %s\n", t["id"].get<std::string>().c_str(),
        static_cast<long long>(t["count"].get<int64_t>()), 100.0 * t["share"].get<double>(),
        static_cast<long long>(t["all_count"].get<int64_t>()),
        fams.empty() ? "-" : join(fams, ", ").c_str());
    out += line;
  }
  std::snprintf(line, sizeof line,
                "\nsample %lld of %lld items (seed %llu); covered by a family: %.1f%%\n",
                static_cast<long long>(r["sample"].get<int64_t>()),
                static_cast<long long>(r["items"].get<int64_t>()),
                static_cast<unsigned long long>(r["seed"].get<uint64_t>()),
                100.0 * r["covered_share"].get<double>());
  out += line;
  std::vector<std::string> unc = r["uncovered"].get<std::vector<std::string>>();
  out += "types in the sample no family covers: " +
         (unc.empty() ? std::string("none") : join(unc, ", ")) + "\n";
  return out;
}

}  // namespace trex::orlib::eval
