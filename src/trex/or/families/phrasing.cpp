#include "trex/or/families/phrasing.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "trex/core/strings.hpp"
#include "trex/or/families/text.hpp"

namespace trex::orlib::text {
namespace {

// "1250" -> "1,250"; "-12500.5" -> "-12,500.5". Leaves other text alone.
std::string group_thousands(const std::string& digits) {
  const size_t sign = !digits.empty() && digits[0] == '-' ? 1 : 0;
  size_t end = digits.find('.');
  if (end == std::string::npos) end = digits.size();
  const std::string whole = digits.substr(sign, end - sign);
  if (whole.size() <= 3) return digits;
  std::string grouped;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (i && (whole.size() - i) % 3 == 0) grouped += ',';
    grouped += whole[i];
  }
  return digits.substr(0, sign) + grouped + digits.substr(end);
}

const char* const kNumberWords[] = {"zero",  "one",   "two",  "three", "four",   "five",  "six",
                                    "seven", "eight", "nine", "ten",   "eleven", "twelve"};

std::string join_clauses(Style& style, const std::vector<std::string>& clauses) {
  if (clauses.size() > 2 && style.chance(0.3)) return join(clauses, "; ");
  return english_list(clauses);
}

}  // namespace

Style::Style(uint64_t seed) : rng_(seed, {hash_string("phrasing")}) {
  thousands_separator_ = chance(0.6);
  money_form_ = chance(0.6) ? 0 : 1 + choose(2);
  percent_form_ = choose(3);
  count_words_ = chance(0.4);
}

std::string Style::pick(std::initializer_list<const char*> options) {
  return *(options.begin() + choose(static_cast<int>(options.size())));
}

const std::string& Style::pick(const std::vector<std::string>& options) {
  return options[static_cast<size_t>(choose(static_cast<int>(options.size())))];
}

int Style::choose(int count) {
  const int i = static_cast<int>(rng_.index(static_cast<size_t>(count)));
  record(static_cast<uint64_t>(i));
  return i;
}

bool Style::chance(double probability) {
  const bool yes = rng_.bernoulli(probability);
  record(yes ? 1 : 0);
  return yes;
}

Layout Style::layout(std::initializer_list<Layout> allowed) {
  return *(allowed.begin() + choose(static_cast<int>(allowed.size())));
}

Layout Style::record_layout(bool prefers_table) {
  if (prefers_table && chance(0.5)) return Layout::table;
  return layout({Layout::table, Layout::bullets, Layout::rows, Layout::columns});
}

std::string Style::num(double v) const {
  const std::string digits = format_number(v);
  return thousands_separator_ ? group_thousands(digits) : digits;
}

std::string Style::money(double v) const {
  const bool cents = std::fabs(v - std::round(v)) > 1e-9;
  char buf[64];
  std::snprintf(buf, sizeof buf, cents ? "%.2f" : "%.0f", std::fabs(v));
  const std::string amount = thousands_separator_ ? group_thousands(buf) : std::string(buf);
  const std::string sign = v < 0 ? "-" : "";
  switch (money_form_) {
    case 1:
      return sign + amount + (v == 1 ? " dollar" : " dollars");
    case 2:
      return sign + "USD " + amount;
    default:
      return sign + "$" + amount;
  }
}

std::string Style::percent(double pct) const {
  const std::string digits = format_number(pct);
  switch (percent_form_) {
    case 1:
      return digits + " percent";
    case 2:
      return digits + " per cent";
    default:
      return digits + "%";
  }
}

std::string Style::count(long v) const {
  if (count_words_ && v >= 0 && v <= 12) return kNumberWords[v];
  return std::to_string(v);
}

std::string Style::count_of(long v, const std::string& noun) const {
  return count(v) + " " + (v == 1 ? noun : plural(noun));
}

std::string render_records(Style& style, Layout layout, const Records& r) {
  const size_t n = r.names.size();
  std::string out;
  switch (layout) {
    case Layout::table: {
      std::vector<std::string> header = {r.row_header};
      for (const Attribute& a : r.attributes) header.push_back(a.header);
      std::vector<std::vector<std::string>> rows;
      for (size_t i = 0; i < n; ++i) {
        std::vector<std::string> row = {r.names[i]};
        for (const Attribute& a : r.attributes) row.push_back(a.cells[i]);
        rows.push_back(std::move(row));
      }
      return markdown_table(header, rows);
    }
    case Layout::bullets: {
      const std::string bullet = style.pick({"- ", "* "});
      for (size_t i = 0; i < n; ++i) {
        std::vector<std::string> clauses;
        for (const Attribute& a : r.attributes) clauses.push_back(a.phrases[i]);
        out += bullet + capitalize(r.names[i]) + ": " + join(clauses, "; ") + ".\n";
      }
      return out;
    }
    case Layout::rows: {
      const bool one_per_line = style.chance(0.5);
      for (size_t i = 0; i < n; ++i) {
        std::vector<std::string> clauses;
        for (const Attribute& a : r.attributes) clauses.push_back(a.phrases[i]);
        out += capitalize(r.row_subjects[i]) + " " + join_clauses(style, clauses) + ".";
        out += one_per_line || i + 1 == n ? "\n" : " ";
      }
      return out;
    }
    case Layout::columns: {
      int form = style.choose(3);
      // "Van 1 152" runs two numbers together: such names take "152 for Van 1".
      for (const std::string& name : r.names)
        if (form == 2 && !name.empty() && std::isdigit(static_cast<unsigned char>(name.back())))
          form = 1;
      for (const Attribute& a : r.attributes) {
        if (form == 0) {
          out += "The " + a.label + " " + (n == 1 ? "is " : "are ") + english_list(a.cells) +
                 " for " + english_list(r.names) + (n > 1 ? ", respectively.\n" : ".\n");
        } else {
          std::vector<std::string> pairs;
          for (size_t i = 0; i < n; ++i)
            pairs.push_back(form == 1 ? a.cells[i] + " for " + r.names[i]
                                      : r.names[i] + " " + a.cells[i]);
          out += capitalize(a.label) + ": " + english_list(pairs) + ".\n";
        }
      }
      return out;
    }
  }
  return out;
}

Composer& Composer::fact(std::string sentence) {
  if (!sentence.empty()) pending_.push_back(std::move(sentence));
  return *this;
}

Composer& Composer::facts(std::vector<std::string> sentences) {
  for (auto& s : sentences) fact(std::move(s));
  return *this;
}

Composer& Composer::block(std::string text) {
  paragraph();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty()) return *this;
  if (!out_.empty()) out_ += "\n\n";
  out_ += text;
  return *this;
}

Composer& Composer::paragraph(bool shuffle) {
  if (pending_.empty()) return *this;
  if (shuffle) style_.shuffle(pending_);
  if (!out_.empty()) out_ += "\n\n";
  out_ += join(pending_, " ");
  pending_.clear();
  return *this;
}

Composer& Composer::distractors(const std::string& org, int max_count, double rate) {
  for (int i = 0; i < max_count; ++i)
    if (style_.chance(rate)) fact(distractor_fact(style_, org, &distractor_kinds_));
  return *this;
}

std::string Composer::text() {
  paragraph();
  return out_;
}

std::string distractor_fact(Style& style, const std::string& name, uint32_t* used_kinds) {
  // "The WKXL classics station" starts a sentence as it is, and reads "the ..." inside one.
  const std::string& org = name;
  const std::string inner = name.rfind("The ", 0) == 0 ? "the " + name.substr(4) : name;
  constexpr int kKinds = 8;
  int kind = style.choose(kKinds);
  if (used_kinds) {  // the next kind not yet stated
    for (int k = 0; k < kKinds && (*used_kinds >> kind & 1u); ++k) kind = (kind + 1) % kKinds;
    *used_kinds |= 1u << kind;
  }
  switch (kind) {
    case 0:
      return org + " was founded in " + std::to_string(style.uniform(1950, 2019)) + ".";
    case 1:
      return org + " employs " + style.num(style.uniform(3, 60) * 10) + " people.";
    case 2:
      return "Last year " + inner + " reported a turnover of " +
             style.money(style.uniform(20, 900) * 10000.0) + ".";
    case 3:
      return capitalize(org) +
             (!org.empty() && org.back() == 's' ? "' main warehouse covers "
                                                : "'s main warehouse covers ") +
             style.num(style.uniform(8, 90) * 100) + " square metres.";
    case 4:
      return "The site of " + inner + " is " + std::to_string(style.uniform(3, 80)) +
             " km from the nearest motorway junction.";
    case 5:
      return "The planning team meets every " +
             style.pick({"Monday", "Tuesday", "Wednesday", "Thursday", "Friday"}) +
             " to review the figures.";
    case 6:
      return org + " holds about " + style.percent(style.uniform(2, 35)) +
             " of its regional market.";
    default:
      return "Customer satisfaction was rated " + std::to_string(style.uniform(60, 98)) +
             " out of 100 in the last survey.";
  }
}

std::string question(Style& style, const std::string& task, const std::string& goal,
                     const std::string& value) {
  switch (style.choose(6)) {
    case 0:
      return "Determine " + task + " so as to " + goal + ", and report " + value + ".";
    case 1:
      return "Find " + task + " in order to " + goal + ". What is " + value + "?";
    case 2:
      return "Formulate and solve a model that decides " + task + " to " + goal + ". Give " +
             value + ".";
    case 3:
      return "The goal is to " + goal + ". Decide " + task + ", and state " + value + ".";
    case 4:
      return "Decide " + task + " to " + goal + ". What is " + value + "?";
    default:
      return "What is " + value + "? Work out " + task + " so as to " + goal + ".";
  }
}

}  // namespace trex::orlib::text
