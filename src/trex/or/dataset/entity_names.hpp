#pragma once
// Entity renaming: a training problem whose named things (products, places,
// workers, resources: the named elements of its model's sets) are given other
// names, the same in the question and in every text derived from it. A family
// draws its names from its theme's pool, so a model trained on the themes'
// own names learns which names go with which story, not to copy them from
// the question; an unseen story then gets the trained stories' names
// (docs/or-datasets.md "Renamed entities"). Renaming is a symbol substitution:
// the model's optimum is unchanged, and the demo data builder re-solves it.
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trex/core/rng.hpp"

namespace trex::orlib {

enum class NameSource {
  invented,  // pronounceable made-up words, sometimes two ("Velmora", "Tarsik Ridge")
  pooled,    // real words from every name pool of the generators (cities, foods, tasks, ...)
};
const char* to_string(NameSource source);

// A made-up proper name: two or three syllables, capitalised; one in four is
// two such words. Never a MathProg keyword (capitalised).
std::string invented_name(Rng& rng);

// The named set elements of a MathProg model (`data;` section set statements)
// that its question mentions: at least three characters, letters, digits and
// '_' only, with a letter; found as written or with '_' read as a space, or
// the plural of either, ignoring case. In the order the data section lists them.
std::vector<std::string> named_elements(const std::string& question, const std::string& model);

// How a text writes names: prose ("dining chair"), MathProg symbols
// (`dining_chair`) or LaTeX (`\text{dining\_chair}`). A one-word element is
// written the same in all three; the new name's form then follows the text.
enum class Written { prose, symbols, latex };

struct EntityRenaming {
  NameSource source = NameSource::invented;
  std::vector<std::pair<std::string, std::string>> names;  // old element -> new element

  // `text` with every renamed element replaced as a whole word, ignoring case:
  // the element ("dining_chair"), its spaced form ("dining chair"), its LaTeX
  // form ("dining\_chair") and the plural of each ("dining chairs") by the
  // same form of the new name. A capital first letter stays capital.
  std::string apply(const std::string& text, Written as) const;
};

// A renaming of `named_elements(question, model)` to new names from `source`,
// or nullopt when there is nothing to rename or it would not be clean: a new
// name that already occurs in the question, the model or one of `others`
// (whatever else will be renamed with them), or an old name that is still
// found in one of them after `apply` (a form the substitution does not know,
// such as an irregular plural). No new name is one of `excluded` (name_key()s),
// e.g. the names of the problems a model is evaluated on.
std::optional<EntityRenaming> plan_renaming(
    const std::string& question, const std::string& model,
    const std::vector<std::pair<std::string, Written>>& others, NameSource source, Rng& rng,
    const std::set<std::string>& excluded = {});
// Where `phrase` occurs in `text` as a whole word (not next to a letter,
// digit or '_'), ignoring case.
std::vector<size_t> word_occurrences(const std::string& text, const std::string& phrase);

// The lower-case spaced form of an element: "Dining_chair" -> "dining chair".
std::string name_key(const std::string& element);

}  // namespace trex::orlib
