#pragma once
// Compositional phrasing of the R-NL word problem. A family's story theme
// (its template) fixes the domain — organisation, goods, units — and the parts
// below vary everything else per instance: one paraphrase per clause, the
// order of independent facts, how a table of data is laid out (Markdown table,
// bullet list, one sentence per row, one sentence per attribute with
// "respectively"), number formats (thousands separators, money and percent
// forms, small counts in words), distractor facts that no model needs, and the
// form of the question. Every choice comes from the instance's own style seed,
// so the same instance always reads the same and a model trained on many
// instances sees the modelling, not one sentence per family.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "trex/core/rng.hpp"

namespace trex::orlib::text {

enum class Layout {
  table,    // Markdown table, one row per entity
  bullets,  // "- Chair: uses 2 hours of ...; profit $12."
  rows,     // "Each chair uses 2 hours of ... and brings a profit of $12."
  columns,  // "Profit per unit is $12, $15 and $9 for chairs, desks and stools respectively."
};

class Style {
 public:
  // `seed` identifies the instance's phrasing (e.g. a hash of its data).
  explicit Style(uint64_t seed);

  // Choices of wording; each is part of the surface form (form()).
  std::string pick(std::initializer_list<const char*> options);
  const std::string& pick(const std::vector<std::string>& options);
  int choose(int count);  // 0 <= i < count
  bool chance(double probability);
  template <class T>
  void shuffle(std::vector<T>& items) {
    for (size_t i = items.size(); i > 1; --i) {
      const size_t j = rng_.index(i);
      record(j);
      std::swap(items[i - 1], items[j]);
    }
  }
  Layout layout(std::initializer_list<Layout> allowed);
  // Any of the four layouts; a theme that habitually shows a table gets one half the time.
  Layout record_layout(bool prefers_table);
  // A value that is not wording (a distractor's number): not part of form().
  int uniform(int lo, int hi) { return rng_.uniform_int(lo, hi); }

  // The choices made so far, hashed: texts with the same form differ only in
  // names and numbers.
  uint64_t form() const { return form_; }

  // Number formats, fixed per instance so one text is consistent with itself.
  // Every form keeps the digits of the value (a model copies them into the
  // data section): "1,250" or "1250"; money "$1,250", "1,250 dollars" or
  // "USD 1,250"; percent "15%", "15 percent" or "15 per cent".
  std::string num(double v) const;
  std::string money(double v) const;
  std::string percent(double pct) const;
  // A count of things ("5 products"): digits, or words up to twelve in some texts.
  std::string count(long v) const;
  // "5 chairs" / "five chairs"; `noun` is singular, made plural when v != 1.
  std::string count_of(long v, const std::string& noun) const;

 private:
  void record(uint64_t choice) { form_ = hash_combine(form_, choice); }

  Rng rng_;
  uint64_t form_ = 0;
  bool thousands_separator_;
  int money_form_;
  int percent_form_;
  bool count_words_;
};

// A table of per-entity data rendered in one of the layouts.
struct Attribute {
  std::string header;                // table column: "Oven time (minutes per tray)"
  std::string label;                 // column sentence: "minutes of oven time per tray"
  std::vector<std::string> cells;    // per row, as the table shows it: "3"
  std::vector<std::string> phrases;  // per row, as a clause: "needs 3 minutes of oven time"
};
struct Records {
  std::string row_header;                 // "Product"
  std::vector<std::string> names;         // row entities, in the data's order
  std::vector<std::string> row_subjects;  // per row, a clause subject: "Each chair"
  std::vector<Attribute> attributes;
};
std::string render_records(Style& style, Layout layout, const Records& records);

// Assembles a word problem from paragraphs of facts. Facts added between two
// `paragraph()` calls may be shuffled (they must not depend on each other's
// order); blocks (tables, lists) stay where they are put.
class Composer {
 public:
  explicit Composer(Style& style) : style_(style) {}
  Composer& fact(std::string sentence);  // a sentence of the current paragraph
  Composer& facts(std::vector<std::string> sentences);
  Composer& block(std::string text);         // a table or list, on its own lines
  Composer& paragraph(bool shuffle = true);  // ends the current paragraph
  // Adds 0..max_count distractor sentences (numbers no model needs) about `org`
  // to the current paragraph, with probability `rate` each.
  Composer& distractors(const std::string& org, int max_count, double rate);
  std::string text();

 private:
  Style& style_;
  std::vector<std::string> pending_;
  std::string out_;
  uint32_t distractor_kinds_ = 0;
};

// A generic distractor sentence about an organisation ("Acme Manufacturing was
// founded in 1987."): true-sounding, irrelevant to the model. `used_kinds`
// (a bit per kind) keeps one text from stating two founding years.
std::string distractor_fact(Style& style, const std::string& org, uint32_t* used_kinds = nullptr);

// The closing request: `task` is what to decide ("how many units of each
// product to make"), `goal` the objective ("maximise the total profit"),
// `value` what to report ("the maximum profit in dollars").
std::string question(Style& style, const std::string& task, const std::string& goal,
                     const std::string& value);

}  // namespace trex::orlib::text
