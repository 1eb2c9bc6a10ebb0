// The compositional phrasing parts: number formats keep the value's digits,
// every layout shows every cell, composition is deterministic per seed and
// varies across seeds.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "trex/or/families/family.hpp"
#include "trex/or/families/phrasing.hpp"

namespace trex::orlib::text {
namespace {

TEST(Phrasing, NumberFormatsKeepTheDigits) {
  std::set<std::string> nums, money, percent, counts;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Style s(seed);
    nums.insert(s.num(1250));
    money.insert(s.money(1250.5));
    percent.insert(s.percent(15));
    counts.insert(s.count(7));
    EXPECT_EQ(s.num(12.5), "12.5");
    EXPECT_EQ(s.num(-3), "-3");
    const std::string big = s.num(-1234567.25);
    EXPECT_TRUE(big == "-1234567.25" || big == "-1,234,567.25") << big;
    EXPECT_EQ(s.count(13), "13");  // words only up to twelve
  }
  EXPECT_EQ(nums, (std::set<std::string>{"1250", "1,250"}));
  EXPECT_EQ(money, (std::set<std::string>{"$1,250.50", "$1250.50", "1,250.50 dollars",
                                          "1250.50 dollars", "USD 1,250.50", "USD 1250.50"}));
  EXPECT_EQ(percent, (std::set<std::string>{"15%", "15 percent", "15 per cent"}));
  EXPECT_EQ(counts, (std::set<std::string>{"7", "seven"}));
}

TEST(Phrasing, OneTextIsConsistentWithItself) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Style s(seed);
    EXPECT_EQ(s.num(4000), s.num(4000));
    EXPECT_EQ(s.money(9), s.money(9));
    EXPECT_EQ(s.count_of(1, "plant"), s.count(1) + " plant");
    EXPECT_EQ(s.count_of(3, "refinery"), s.count(3) + " refineries");
  }
}

Records sample_records() {
  Records r;
  r.row_header = "Product";
  r.names = {"chair", "desk", "stool"};
  r.row_subjects = {"each chair", "each desk", "each stool"};
  Attribute hours{"Hours (per unit)", "hours per unit", {"2", "3.5", "1"}, {}};
  Attribute profit{"Profit ($ per unit)", "profit per unit in dollars", {"12", "1,040", "7"}, {}};
  for (size_t i = 0; i < 3; ++i) {
    hours.phrases.push_back("takes " + hours.cells[i] + " hours");
    profit.phrases.push_back("earns $" + profit.cells[i]);
  }
  r.attributes = {hours, profit};
  return r;
}

TEST(Phrasing, EveryLayoutShowsEveryCellInRowOrder) {
  const Records r = sample_records();
  std::set<std::string> texts;
  for (Layout layout : {Layout::table, Layout::bullets, Layout::rows, Layout::columns}) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      Style s(seed);
      const std::string t = render_records(s, layout, r);
      texts.insert(t);
      for (const Attribute& a : r.attributes) {
        size_t at = 0;
        for (const std::string& cell : a.cells) {
          const size_t found = t.find(cell, at);
          ASSERT_NE(found, std::string::npos) << cell << " missing or out of order in\n" << t;
          at = found + cell.size();
        }
      }
      for (const std::string& name : r.names)
        EXPECT_NE(t.find(name.substr(1)), std::string::npos) << name << " in\n" << t;
    }
  }
  EXPECT_GE(texts.size(), 6u);  // layouts and their variants differ
  Style s(1);
  const std::string table = render_records(s, Layout::table, r);
  EXPECT_EQ(table.substr(0, table.find('\n')),
            "| Product | Hours (per unit) | Profit ($ per unit) |");
}

TEST(Phrasing, ComposerKeepsBlocksInPlaceAndShufflesFacts) {
  std::set<std::string> orders;
  std::set<uint64_t> forms;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Style s(seed);
    Composer c(s);
    c.fact("Intro.").paragraph(false);
    c.block("| a | b |\n|---|---|\n| 1 | 2 |\n");
    c.facts({"One.", "Two.", "Three."});
    c.fact("Question?");
    const std::string t = c.text();
    EXPECT_EQ(t.rfind("Intro.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n", 0), 0u) << t;
    for (const char* f : {"One.", "Two.", "Three.", "Question?"})
      EXPECT_NE(t.find(f), std::string::npos);
    orders.insert(t);
    forms.insert(s.form());
    Style again(seed);
    Composer c2(again);
    c2.fact("Intro.").paragraph(false);
    c2.block("| a | b |\n|---|---|\n| 1 | 2 |\n");
    c2.facts({"One.", "Two.", "Three."});
    c2.fact("Question?");
    EXPECT_EQ(c2.text(), t);
    EXPECT_EQ(again.form(), s.form());
  }
  EXPECT_GE(orders.size(), 10u);
  EXPECT_GE(forms.size(), orders.size());
}

TEST(Phrasing, DistractorsAndQuestionsVary) {
  std::set<std::string> distractors, questions;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    Style s(seed);
    const std::string d = distractor_fact(s, "Acme");
    EXPECT_FALSE(d.empty());
    EXPECT_EQ(d.back(), '.');
    distractors.insert(d.substr(0, 12));
    const std::string q = question(s, "how many units of each product to make",
                                   "maximise the total profit", "the maximum profit");
    EXPECT_NE(q.find("how many units of each product to make"), std::string::npos);
    EXPECT_NE(q.find("maximise the total profit"), std::string::npos);
    EXPECT_NE(q.find("the maximum profit"), std::string::npos);
    questions.insert(q);
  }
  EXPECT_GE(distractors.size(), 6u);
  EXPECT_EQ(questions.size(), 6u);
}

}  // namespace
}  // namespace trex::orlib::text
