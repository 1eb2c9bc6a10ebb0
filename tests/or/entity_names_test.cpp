// Entity renaming (or/dataset/entity_names.hpp): the renamed question names
// only the new names, the renamed model solves to the same optimum.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "trex/core/rng.hpp"
#include "trex/or/dataset/entity_names.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"

namespace trex::orlib {
namespace {

bool mentions_word(const std::string& text, const std::string& phrase) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string t = lower(text), p = lower(phrase);
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = t.find(p); at != std::string::npos; at = t.find(p, at + 1))
    if ((at == 0 || !word(t[at - 1])) && (at + p.size() == t.size() || !word(t[at + p.size()])))
      return true;
  return false;
}

std::string spaced(std::string s) {
  for (char& c : s)
    if (c == '_') c = ' ';
  return s;
}

TEST(EntityNames, InventedNamesArePronounceableProperNames) {
  Rng rng(3);
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    const std::string name = invented_name(rng);
    ASSERT_GE(name.size(), 4u) << name;
    EXPECT_TRUE(std::isupper(static_cast<unsigned char>(name[0]))) << name;
    for (char c : name)
      EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(c)) || c == ' ') << name;
    seen.insert(name);
  }
  EXPECT_GT(seen.size(), 180u);  // made up, not a short list
}

TEST(EntityNames, NamedElementsAreTheSetElementsTheQuestionMentions) {
  const std::string question =
      "A bakery makes Rye bread and muffins in ovens O1 and O2. Each tray of rye bread ...";
  const std::string model =
      "set P;\nset O;\nparam c{P};\nvar x{P} >= 0;\nmaximize z: sum{p in P} c[p] * x[p];\n"
      "data;\nset P := rye_bread muffin bagel;\nset O := O1 O2;\nparam c := rye_bread 3 muffin 2 "
      "bagel 1;\nend;\n";
  // bagel is not in the question; O1/O2 are shorter than three characters.
  EXPECT_EQ(named_elements(question, model), (std::vector<std::string>{"rye_bread", "muffin"}));
}

TEST(EntityNames, ApplyRenamesEveryFormAndKeepsCapitals) {
  EntityRenaming r;
  r.names = {{"dining_chair", "Velmora"}, {"desk", "oak_lamp"}};
  EXPECT_EQ(r.apply("Dining chairs sell well; a dining chair needs 2 h; desks and a desk.",
                    Written::prose),
            "Velmoras sell well; a Velmora needs 2 h; oak lamps and a oak lamp.");
  // A one-word element ("desk") takes the new name's symbol form in a model.
  EXPECT_EQ(
      r.apply("set P := dining_chair desk;\nparam p := dining_chair 3 desk 4;", Written::symbols),
      "set P := Velmora oak_lamp;\nparam p := Velmora 3 oak_lamp 4;");
  EXPECT_EQ(r.apply("P = \\{\\text{dining\\_chair}, \\text{desk}\\}", Written::latex),
            "P = \\{\\text{Velmora}, \\text{oak\\_lamp}\\}");
  // Whole words only: "desktop" and "desk_time" are other words.
  EXPECT_EQ(r.apply("desktop desk_time", Written::prose), "desktop desk_time");
}

TEST(EntityNames, ACaseVariantInTheModelIsNotRenamed) {
  // "Labour" (a parameter) and "labour" (an element) would both become one name.
  const std::string question = "Each unit needs labour hours.";
  const std::string model =
      "set R;\nparam Labour;\nvar x >= 0;\nmaximize z: x;\ns.t. c: x <= Labour;\n"
      "data;\nset R := labour;\nparam Labour := 4;\nend;\n";
  Rng rng(1);
  EXPECT_FALSE(plan_renaming(question, model, {}, NameSource::invented, rng).has_value());
}

TEST(EntityNames, ExcludedNamesAreNeverChosen) {
  const std::string question = "Ship from Lyon to Porto.";
  const std::string model = "set S;\ndata;\nset S := Lyon Porto;\nend;\n";
  std::set<std::string> excluded;
  for (const auto& name : {"madrid", "berlin", "tokyo"}) excluded.insert(name);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Rng rng(seed);
    auto r = plan_renaming(question, model, {}, NameSource::pooled, rng, excluded);
    ASSERT_TRUE(r.has_value());
    for (const auto& [from, to] : r->names) EXPECT_EQ(excluded.count(name_key(to)), 0u) << to;
  }
}

// Every family, both name sources: where a renaming is planned, the question
// no longer names an old element, names every new one, and the renamed model
// solves to the original optimum.
TEST(EntityNames, RenamedInstancesOfEveryFamilyKeepTheirOptimum) {
  int planned = 0, tried = 0;
  std::set<std::string> families_renamed;
  for (const Family* f : all_families()) {
    for (uint64_t i = 0; i < 2; ++i) {
      Rng gen(11, {hash_string(f->name()), i});
      GenOptions options;
      options.difficulty = Difficulty::easy;
      auto inst = f->generate(gen, options);
      const std::string nl = inst->nl(), gmpl = inst->gmpl(), alg = inst->alg();
      const double objective = LinearModel::from_mathprog(gmpl).solve_glpk().objective;
      for (NameSource source : {NameSource::invented, NameSource::pooled}) {
        ++tried;
        Rng rng(5, {hash_string(f->name()), i, static_cast<uint64_t>(source)});
        auto r = plan_renaming(nl, gmpl, {{alg, Written::latex}}, source, rng);
        if (!r) continue;
        ++planned;
        families_renamed.insert(std::string(f->name()));
        const std::string renamed_nl = r->apply(nl, Written::prose);
        const std::string renamed_gmpl = r->apply(gmpl, Written::symbols);
        for (const auto& [from, to] : r->names) {
          EXPECT_FALSE(mentions_word(renamed_nl, from) || mentions_word(renamed_nl, spaced(from)))
              << f->name() << ": " << from << " still in\n"
              << renamed_nl;
          EXPECT_TRUE(mentions_word(renamed_nl, spaced(to)) || mentions_word(renamed_nl, to))
              << f->name() << ": " << to << " not in\n"
              << renamed_nl;
          EXPECT_TRUE(mentions_word(renamed_gmpl, to)) << f->name() << ": " << to;
          EXPECT_FALSE(mentions_word(r->apply(alg, Written::latex), from)) << f->name();
        }
        SolveResult s = LinearModel::from_mathprog(renamed_gmpl).solve_glpk();
        ASSERT_EQ(s.status, SolveStatus::optimal) << f->name() << "\n" << renamed_gmpl;
        EXPECT_NEAR(s.objective, objective, 1e-6 * (1 + std::abs(objective))) << f->name();
      }
    }
  }
  EXPECT_GT(planned, tried / 2);
  for (const char* trained : {"product_mix", "transportation", "assignment", "bin_packing"})
    EXPECT_TRUE(families_renamed.count(trained)) << trained << " never renamed";
}

}  // namespace
}  // namespace trex::orlib
