// Cyclic shift scheduling (IP): the periods of a day (time blocks) or of a week
// (days) have staff requirements; each candidate shift covers a run of
// consecutive periods, wrapping around midnight or the end of the week, and
// costs a fixed amount per person. Choose whole numbers of staff per shift.
//
// Generator: draws candidate shifts that together cover every period, plants a
// staffing plan and sets each requirement at or a little below the planted
// coverage, so the plan is feasible and every requirement is positive.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "trex/or/families/alg_writer.hpp"
#include "trex/or/families/family_list.hpp"
#include "trex/or/families/gmpl_writer.hpp"
#include "trex/or/families/text.hpp"
#include "trex/or/families/themed.hpp"

namespace trex::orlib {
namespace {

enum class Layout { table, bullets, prose };

struct Theme {
  std::string intro;  // {org} -> organisation, {city} -> city name
  std::string staff;  // plural noun: "nurses"
  std::string one;    // singular noun: "nurse"
  bool weekly;        // periods are days of the week (else blocks of a day)
  int max_per_shift;  // largest planted head count on one shift
  std::string question;
  Layout layout;
};

const std::vector<Theme>& themes() {
  static const std::vector<Theme> t = {
      {"The emergency department of {city} General Hospital staffs its nurses around the clock.",
       "nurses", "nurse", false, 4,
       "How many nurses should be assigned to each shift so that every block is covered at "
       "minimum total cost? What is that minimum cost?",
       Layout::table},
      {"The customer service centre of {org} answers calls around the clock and must decide how "
       "many agents to schedule on each shift.",
       "agents", "agent", false, 6,
       "Find the number of agents per shift that meets all requirements at the lowest total "
       "daily cost, and state that cost.",
       Layout::prose},
      {"{org} runs a large store in {city} that is open seven days a week and is setting up its "
       "weekly roster of sales associates.",
       "sales associates", "sales associate", true, 5,
       "How many associates should follow each working pattern to meet every daily requirement "
       "at minimum weekly cost? Give the minimum cost.",
       Layout::table},
      {"A security company guards the {city} depot of {org} every day of the week and needs a "
       "weekly roster for its guards.",
       "guards", "guard", true, 3,
       "Determine how many guards to hire on each pattern so that all days are covered and the "
       "weekly payroll is as small as possible. What is the minimum payroll?",
       Layout::bullets},
      {"Ground handling at {city} Airport loads and unloads aircraft 24 hours a day, and the "
       "supervisor must plan the baggage handlers' shifts.",
       "baggage handlers", "baggage handler", false, 5,
       "How many handlers should work each shift to cover every block at minimum daily cost, "
       "and what is that cost?",
       Layout::bullets},
      {"The {city} bus depot operated by {org} needs drivers on duty every day of the week.",
       "drivers", "driver", true, 6,
       "Choose the number of drivers on each duty pattern so that the daily requirements are met "
       "at the lowest weekly wage bill, and report that bill.",
       Layout::prose},
  };
  return t;
}

const std::vector<std::string>& day_names() {
  static const std::vector<std::string> v = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                             "Friday", "Saturday", "Sunday"};
  return v;
}

std::string clock(int hour) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%02d:00", hour % 24);
  return buf;
}

struct Shift {
  int start = 0;   // first period, 0-based
  int length = 0;  // number of periods covered
  double cost = 0;
};

class ShiftInstance : public ThemedInstance<themes> {
 public:
  std::string city;
  int block_hours = 1;           // hours per period (daily mode)
  std::vector<double> required;  // r_t
  std::vector<Shift> shifts;
  std::vector<std::string> keys;  // shift symbols
  // Part-time limit: shifts of at most part_time_length periods count as part-time.
  int part_time_length = 0;
  int part_time_max = -1;             // -1 = no limit
  int min_shift = -1, min_count = 0;  // shift index and its minimum head count
  int max_shift = -1, max_count = 0;  // shift index and its maximum head count

  size_t periods() const { return required.size(); }
  bool weekly() const { return theme().weekly; }
  int side_count() const { return (part_time_max >= 0) + (min_shift >= 0) + (max_shift >= 0); }
  bool covers(const Shift& s, size_t t) const {
    const int n = static_cast<int>(periods());
    return (static_cast<int>(t) - s.start + n) % n < s.length;
  }
  bool part_time(const Shift& s) const { return s.length <= part_time_length; }

  json size() const override {
    return {{"periods", periods()},
            {"shifts", shifts.size()},
            {"weekly", weekly()},
            {"side_constraints", side_count()}};
  }
  std::vector<std::string> variants() const override {
    std::vector<std::string> v = {weekly() ? "weekly" : "daily"};
    if (part_time_max >= 0) v.push_back("part_time_limit");
    if (min_shift >= 0) v.push_back("min_on_shift");
    if (max_shift >= 0) v.push_back("max_on_shift");
    return v;
  }

  std::string period_label(size_t t) const {
    if (weekly()) return day_names()[t];
    const int h = static_cast<int>(t) * block_hours;
    return clock(h) + "-" + clock(h + block_hours);
  }
  std::string shift_label(const Shift& s) const {
    if (weekly()) {
      const auto& d = day_names();
      return d[static_cast<size_t>(s.start)].substr(0, 3) + "-" +
             d[static_cast<size_t>((s.start + s.length - 1) % 7)].substr(0, 3);
    }
    return clock(s.start * block_hours) + "-" + clock((s.start + s.length) * block_hours);
  }
  std::string shift_span(const Shift& s) const {
    if (weekly()) return std::to_string(s.length) + " consecutive days";
    return std::to_string(s.length * block_hours) + " hours";
  }
  std::string part_time_rule() const {
    return weekly()
               ? "patterns of at most " + std::to_string(part_time_length) + " days"
               : "shifts of at most " + std::to_string(part_time_length * block_hours) + " hours";
  }

  std::string nl() const override {
    const Theme& th = theme();
    std::string out = text::fill(th.intro, {{"{org}", org}, {"{city}", city}}) + " ";
    const std::string unit = weekly() ? "day" : "block";
    if (weekly())
      out += "The number of " + th.staff + " needed on duty differs by day of the week. ";
    else
      out += "The day is divided into " + std::to_string(periods()) + " blocks of " +
             std::to_string(block_hours) + (block_hours == 1 ? " hour" : " hours") +
             ", each with a minimum number of " + th.staff + " on duty. ";
    const std::string kind = weekly() ? "working pattern" : "shift";
    out += "Each " + th.one + " works one of " + std::to_string(shifts.size()) + " possible " +
           kind + "s, each covering consecutive " + unit + "s. ";
    if (weekly())
      out +=
          "The roster repeats every week, so a pattern that runs past Sunday continues on "
          "Monday.";
    else
      out +=
          "The schedule repeats every day, so a shift that runs past midnight covers the "
          "early blocks as well.";
    out += "\n\n";

    std::vector<std::vector<std::string>> req_rows;
    std::vector<std::string> req_prose;
    for (size_t t = 0; t < periods(); ++t) {
      req_rows.push_back({period_label(t), text::num(required[t])});
      req_prose.push_back(text::num(required[t]) + (weekly() ? " on " : " for ") + period_label(t));
    }
    auto shift_rows = [&] {
      std::vector<std::vector<std::string>> rows;
      for (const auto& s : shifts)
        rows.push_back({shift_label(s), shift_span(s), text::num(s.cost)});
      return rows;
    };
    const std::string cost_word = weekly() ? "weekly cost per " + th.one : "cost per " + th.one;
    if (th.layout == Layout::table) {
      out += "Minimum staffing:\n\n" +
             text::markdown_table(
                 {weekly() ? "Day" : "Block", text::capitalize(th.staff) + " required"}, req_rows) +
             "\n";
      out += "Available " + kind + "s:\n\n" +
             text::markdown_table({text::capitalize(kind), weekly() ? "Length" : "Duration",
                                   text::capitalize(cost_word) + " ($)"},
                                  shift_rows()) +
             "\n";
    } else if (th.layout == Layout::bullets) {
      out +=
          "At least " + text::english_list(req_prose) + " are required. The " + kind + "s are:\n\n";
      for (const auto& s : shifts)
        out += "- " + shift_label(s) + " (" + shift_span(s) + "), " + text::money(s.cost) +
               " per " + th.one + "\n";
      out += "\n";
    } else {
      out += "The requirements are at least " + text::english_list(req_prose) + ". ";
      std::vector<std::string> parts;
      for (const auto& s : shifts)
        parts.push_back("the " + shift_label(s) + " " + kind + " (" + shift_span(s) + ") costs " +
                        text::money(s.cost) + " per " + th.one);
      out += text::capitalize(text::english_list(parts)) + ".\n\n";
    }
    if (part_time_max >= 0)
      out += text::capitalize(part_time_rule()) + " count as part-time, and at most " +
             std::to_string(part_time_max) + " " + th.staff + " in total may work part-time. ";
    if (min_shift >= 0)
      out += "At least " + std::to_string(min_count) + " " + (min_count == 1 ? th.one : th.staff) +
             " must work the " + shift_label(shifts[static_cast<size_t>(min_shift)]) + " " + kind +
             " to handle the handover duties scheduled then. ";
    if (max_shift >= 0)
      out += "No more than " + std::to_string(max_count) + " " +
             (max_count == 1 ? th.one : th.staff) + " can be put on the " +
             shift_label(shifts[static_cast<size_t>(max_shift)]) + " " + kind +
             " because of limited workstations. ";
    out += "The number of " + th.staff + " on each " + kind + " must be a whole number.\n\n";
    out += th.question;
    return out;
  }

  std::string alg() const override {
    AlgebraicFormulation f(weekly() ? "Cyclic weekly staff rostering" : "Cyclic shift scheduling");
    const int n = static_cast<int>(periods());
    f.set("$P = \\{1,\\dots," + std::to_string(n) + "\\}$",
          weekly() ? "days of the week (1 = Monday)"
                   : "blocks of " + std::to_string(block_hours) + " h (1 starts at 00:00)");
    f.set("$S = " + latex_set(keys) + "$", weekly() ? "working patterns" : "shifts");
    std::vector<double> start, len, cost;
    std::vector<std::vector<double>> cover;
    for (const auto& s : shifts) {
      start.push_back(s.start + 1);
      len.push_back(s.length);
      cost.push_back(s.cost);
      std::vector<double> row;
      for (size_t t = 0; t < periods(); ++t) row.push_back(covers(s, t) ? 1 : 0);
      cover.push_back(row);
    }
    f.parameter("$r_t$", "staff required in period $t$", latex_vector(required));
    f.parameter("$\\sigma_s$", "first period of shift $s$", latex_vector(start));
    f.parameter("$\\ell_s$", "number of periods covered by shift $s$", latex_vector(len));
    f.parameter("$c_s$", "cost per person on shift $s$ ($)", latex_vector(cost));
    f.parameter("$a_{s,t} = [(t - \\sigma_s) \\bmod " + std::to_string(n) + " < \\ell_s]$",
                "1 if shift $s$ covers period $t$ (wrapping around)", latex_matrix(cover));
    if (part_time_max >= 0) {
      f.parameter("$L$", "longest part-time shift (periods)", std::to_string(part_time_length));
      f.parameter("$N$", "maximum number of part-time staff", std::to_string(part_time_max));
    }
    f.variable("$z_s \\in \\mathbb{Z}_{\\ge 0}$", "number of staff on shift $s$");
    f.objective("\\min \\sum_{s \\in S} c_s z_s", "Minimise the total staff cost");
    f.constraint("coverage", "\\sum_{s \\in S} a_{s,t} z_s \\ge r_t \\quad \\forall t \\in P");
    if (part_time_max >= 0)
      f.constraint("part-time limit", "\\sum_{s \\in S: \\ell_s \\le L} z_s \\le N");
    if (min_shift >= 0)
      f.constraint("minimum on shift", "z_{" + latex_name(keys[static_cast<size_t>(min_shift)]) +
                                           "} \\ge " + std::to_string(min_count));
    if (max_shift >= 0)
      f.constraint("maximum on shift", "z_{" + latex_name(keys[static_cast<size_t>(max_shift)]) +
                                           "} \\le " + std::to_string(max_count));
    return f.markdown();
  }

  std::string gmpl() const override {
    std::string model =
        "param n integer > 0;\nset P := 1..n;\nset S;\n"
        "param start{S} integer, >= 1, <= n;\nparam len{S} integer, >= 1, <= n;\n"
        "param cost{S} >= 0;\nparam req{P} >= 0;\n"
        "# a shift covers len consecutive periods from its start, wrapping around\n"
        "param covers{s in S, t in P} := if (t - start[s] + n) mod n < len[s] then 1 else 0;\n";
    if (part_time_max >= 0) model += "param L integer >= 0;\nparam N integer >= 0;\n";
    model +=
        "var z{S} integer >= 0;\n"
        "minimize TotalCost: sum{s in S} cost[s] * z[s];\n"
        "s.t. Coverage{t in P}: sum{s in S} covers[s, t] * z[s] >= req[t];\n";
    if (part_time_max >= 0) model += "s.t. PartTime: sum{s in S: len[s] <= L} z[s] <= N;\n";
    if (min_shift >= 0)
      model += "s.t. MinOnShift: z['" + keys[static_cast<size_t>(min_shift)] +
               "'] >= " + std::to_string(min_count) + ";\n";
    if (max_shift >= 0)
      model += "s.t. MaxOnShift: z['" + keys[static_cast<size_t>(max_shift)] +
               "'] <= " + std::to_string(max_count) + ";\n";
    std::vector<double> start, len, cost;
    for (const auto& s : shifts) {
      start.push_back(s.start + 1);
      len.push_back(s.length);
      cost.push_back(s.cost);
    }
    GmplData data;
    data.param("n", static_cast<double>(periods())).set("S", keys);
    data.param("start", keys, start).param("len", keys, len).param("cost", keys, cost);
    data.param("req", numbered("", static_cast<int>(periods())), required);
    if (part_time_max >= 0) data.param("L", part_time_length).param("N", part_time_max);
    return compose_gmpl(model, "TotalCost", data);
  }

  CheckResult check(const Solution& sol) const override {
    Checker c;
    std::vector<double> z(shifts.size());
    double objective = 0, part = 0;
    for (size_t s = 0; s < shifts.size(); ++s) {
      z[s] = sol.value("z", {keys[s]});
      c.ge(z[s], 0, "staff on " + keys[s]);
      c.integral(z[s], "staff on " + keys[s]);
      objective += shifts[s].cost * z[s];
      if (part_time(shifts[s])) part += z[s];
    }
    for (size_t t = 0; t < periods(); ++t) {
      double on_duty = 0;
      for (size_t s = 0; s < shifts.size(); ++s)
        if (covers(shifts[s], t)) on_duty += z[s];
      c.ge(on_duty, required[t], "coverage of " + period_label(t));
    }
    if (part_time_max >= 0) c.le(part, part_time_max, "part-time staff");
    if (min_shift >= 0)
      c.ge(z[static_cast<size_t>(min_shift)], min_count,
           "minimum on " + keys[static_cast<size_t>(min_shift)]);
    if (max_shift >= 0)
      c.le(z[static_cast<size_t>(max_shift)], max_count,
           "maximum on " + keys[static_cast<size_t>(max_shift)]);
    return c.result(objective);
  }
};

class ShiftSchedulingFamily : public ThemedFamily<themes> {
 public:
  std::string_view name() const override { return "shift_scheduling"; }
  std::string_view title() const override {
    return "Shift scheduling (cyclic daily shifts or weekly rosters)";
  }
  ProblemClass problem_class() const override { return ProblemClass::ip; }

  std::unique_ptr<Instance> generate(Rng& rng, const GenOptions& options) const override {
    auto inst = std::make_unique<ShiftInstance>();
    inst->template_id = choose_template(rng, options, nl_templates());
    const Theme& th = inst->theme();
    inst->org = rng.pick(text::companies());
    inst->city = rng.pick(text::cities());
    const Difficulty diff = options.difficulty;

    // Periods and the lengths a shift may have (in periods).
    int n = 7;
    std::vector<int> lengths;
    if (th.weekly) {
      lengths = {2, 3, 4, 5};
    } else {
      std::vector<int> options_h = diff == Difficulty::easy     ? std::vector<int>{4}
                                   : diff == Difficulty::medium ? std::vector<int>{3, 2}
                                                                : std::vector<int>{2, 1};
      inst->block_hours = rng.pick(options_h);
      n = 24 / inst->block_hours;
      for (int hours : {4, 6, 8, 10, 12})
        if (hours % inst->block_hours == 0) lengths.push_back(hours / inst->block_hours);
    }
    const size_t count = static_cast<size_t>(size_for(rng, diff, {3, 5}, {5, 8}, {8, 12}));

    // Candidate shifts: a random sample, then one more shift for any period left uncovered.
    std::vector<std::pair<int, int>> pool;
    for (int s = 0; s < n; ++s)
      for (int len : lengths) pool.emplace_back(s, len);
    std::vector<std::pair<int, int>> chosen;
    for (size_t i : rng.sample(pool.size(), std::min(count, pool.size())))
      chosen.push_back(pool[i]);
    auto covered = [&](int t) {
      for (auto [s, len] : chosen)
        if ((t - s + n) % n < len) return true;
      return false;
    };
    for (int t = 0; t < n; ++t)
      if (!covered(t)) chosen.emplace_back(t, rng.pick(lengths));
    std::sort(chosen.begin(), chosen.end());

    // Pay: a fixed amount per person plus a rate per hour (day) or per day (week), with a
    // premium for night hours or weekend days.
    const double fixed = 5.0 * rng.uniform_int(0, 6) * (th.weekly ? 4 : 1);
    const double rate = th.weekly ? 10.0 * rng.uniform_int(12, 22) : rng.uniform_int(16, 32);
    const double premium = th.weekly ? 10.0 * rng.uniform_int(2, 6) : rng.uniform_int(2, 8);
    for (auto [s, len] : chosen) {
      Shift sh{s, len, 0};
      double base = 0, extra = 0;
      if (th.weekly) {
        for (int k = 0; k < len; ++k) {
          int day = (s + k) % 7;
          base += rate;
          if (day >= 5) extra += premium;
        }
      } else {
        for (int k = 0; k < len * inst->block_hours; ++k) {
          int hour = (s * inst->block_hours + k) % 24;
          base += rate;
          if (hour >= 22 || hour < 6) extra += premium;
        }
      }
      sh.cost = fixed + base + extra;
      inst->shifts.push_back(sh);
      if (th.weekly)
        inst->keys.push_back(day_names()[static_cast<size_t>(s)].substr(0, 3) + "_" +
                             std::to_string(len) + "d");
      else
        inst->keys.push_back("S" + clock(s * inst->block_hours).substr(0, 2) + "_" +
                             std::to_string(len * inst->block_hours) + "h");
    }

    // Planted staffing; every period gets at least one person.
    const size_t m = inst->shifts.size();
    inst->required.assign(static_cast<size_t>(n), 1.0);  // sized now: covers() wraps modulo n
    std::vector<int> plan(m);
    for (auto& z : plan) z = rng.uniform_int(0, th.max_per_shift);
    std::vector<int> on_duty(static_cast<size_t>(n), 0);
    auto recount = [&] {
      std::fill(on_duty.begin(), on_duty.end(), 0);
      for (size_t s = 0; s < m; ++s)
        for (int t = 0; t < n; ++t)
          if (inst->covers(inst->shifts[s], static_cast<size_t>(t)))
            on_duty[static_cast<size_t>(t)] += plan[s];
    };
    recount();
    for (int t = 0; t < n; ++t) {
      if (on_duty[static_cast<size_t>(t)] > 0) continue;
      std::vector<size_t> options_s;
      for (size_t s = 0; s < m; ++s)
        if (inst->covers(inst->shifts[s], static_cast<size_t>(t))) options_s.push_back(s);
      plan[rng.pick(options_s)] += 1;
      recount();
    }
    for (int t = 0; t < n; ++t) {
      int have = on_duty[static_cast<size_t>(t)];
      inst->required[static_cast<size_t>(t)] =
          std::max(1, have - rng.uniform_int(0, (have * 2) / 5));
    }

    // Optional conditions, each satisfied by the planted staffing.
    const double rate_side = options.side_constraint_rate;
    inst->part_time_length = th.weekly ? 3 : std::max(1, 6 / inst->block_hours);
    if (rng.bernoulli(rate_side)) {
      int part = 0;
      bool any_full = false;
      for (size_t s = 0; s < m; ++s) {
        if (inst->part_time(inst->shifts[s]))
          part += plan[s];
        else
          any_full = true;
      }
      if (part > 0 && any_full) inst->part_time_max = part + rng.uniform_int(0, 1);
    }
    if (rng.bernoulli(rate_side)) {
      std::vector<int> used;
      for (size_t s = 0; s < m; ++s)
        if (plan[s] > 0) used.push_back(static_cast<int>(s));
      if (!used.empty()) {
        inst->min_shift = rng.pick(used);
        inst->min_count = rng.uniform_int(1, plan[static_cast<size_t>(inst->min_shift)]);
      }
    }
    if (rng.bernoulli(rate_side)) {
      int s = static_cast<int>(rng.index(m));
      if (s != inst->min_shift) {
        inst->max_shift = s;
        inst->max_count = std::max(1, plan[static_cast<size_t>(s)] + rng.uniform_int(0, 1));
      }
    }
    return inst;
  }
};

}  // namespace

const Family& shift_scheduling_family() {
  static const ShiftSchedulingFamily family;
  return family;
}

}  // namespace trex::orlib
