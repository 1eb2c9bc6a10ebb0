#include "trex/or/dataset/entity_names.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <set>

#include "trex/core/strings.hpp"
#include "trex/or/dataset/gmpl_edit.hpp"
#include "trex/or/families/text.hpp"

namespace trex::orlib {
namespace {

bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

std::string spaced(std::string s) {
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

std::string underscored(std::string s) {
  std::replace(s.begin(), s.end(), ' ', '_');
  return s;
}

// Where `phrase` starts in `text` as a whole word, ignoring case (`lower_text`
// is `text` in lower case).
std::vector<size_t> whole_word_at(const std::string& lower_text, const std::string& lower_phrase) {
  std::vector<size_t> out;
  if (lower_phrase.empty()) return out;
  for (size_t at = lower_text.find(lower_phrase); at != std::string::npos;
       at = lower_text.find(lower_phrase, at + 1)) {
    const size_t end = at + lower_phrase.size();
    if (at > 0 && word_char(lower_text[at - 1])) continue;
    if (end < lower_text.size() && word_char(lower_text[end])) continue;
    out.push_back(at);
  }
  return out;
}

bool mentions(const std::string& text, const std::string& phrase) {
  return !whole_word_at(to_lower(text), to_lower(phrase)).empty();
}

// As alg_writer writes a symbol inside \text{}: "dining\_chair".
std::string latex(const std::string& element) {
  return replace_all(element, "_", "\\_");
}

// The old -> new written forms of a renamed element, the text's own first
// where a one-word element's forms coincide.
std::vector<std::pair<std::string, std::string>> form_pairs(const std::string& from,
                                                            const std::string& to, Written as) {
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  const Pairs symbols = {{from, to}, {text::plural(from), text::plural(to)}};
  const Pairs prose = {{spaced(from), spaced(to)},
                       {text::plural(spaced(from)), text::plural(spaced(to))}};
  const Pairs latex_forms = {{latex(from), latex(to)},
                             {latex(text::plural(from)), latex(text::plural(to))}};
  const std::array<const Pairs*, 3> order =
      as == Written::symbols ? std::array{&symbols, &latex_forms, &prose}
      : as == Written::latex ? std::array{&latex_forms, &symbols, &prose}
                             : std::array{&prose, &symbols, &latex_forms};
  Pairs out;
  for (const auto* list : order)
    for (const auto& pair : *list)
      if (std::none_of(out.begin(), out.end(),
                       [&](const auto& p) { return p.first == pair.first; }))
        out.push_back(pair);
  return out;
}

// The written forms of a name: as an element, spaced, in LaTeX, and plurals.
std::vector<std::string> forms(const std::string& element) {
  std::vector<std::string> out = {element, spaced(element), text::plural(element),
                                  text::plural(spaced(element)), latex(element)};
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool letters_and_spaces(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == ' ';
  });
}

// Every name of the generators' pools that can be written as a MathProg
// element by replacing spaces with '_'.
const std::vector<std::string>& pooled_names() {
  static const std::vector<std::string> names = [] {
    std::set<std::string> all;
    for (const auto* pool : {&text::products(), &text::cities(), &text::people(), &text::foods(),
                             &text::nutrients(), &text::resources(), &text::projects(),
                             &text::assets(), &text::ingredients(), &text::tasks()})
      for (const std::string& name : *pool)
        if (letters_and_spaces(name)) all.insert(name);
    return std::vector<std::string>(all.begin(), all.end());
  }();
  return names;
}

}  // namespace

const char* to_string(NameSource source) {
  switch (source) {
    case NameSource::invented:
      return "invented";
    case NameSource::pooled:
      return "pooled";
  }
  return "?";
}

std::string invented_name(Rng& rng) {
  static const std::vector<std::string> onsets = {"b",  "d",  "f",  "g",  "k",  "l",  "m",  "n",
                                                  "p",  "r",  "s",  "t",  "v",  "z",  "br", "dr",
                                                  "kr", "st", "tr", "gl", "th", "sh", "h",  "j"};
  static const std::vector<std::string> vowels = {"a",  "e",  "i", "o", "u", "ai",
                                                  "ei", "ou", "a", "e", "o"};
  static const std::vector<std::string> codas = {"", "", "", "", "n", "r", "l", "s", "k", "m"};
  auto word = [&] {
    std::string w;
    const int syllables = rng.uniform_int(2, 3);
    for (int s = 0; s < syllables; ++s) {
      w += rng.pick(onsets);
      w += rng.pick(vowels);
      if (s + 1 == syllables || rng.bernoulli(0.3)) w += rng.pick(codas);
    }
    return text::capitalize(w);
  };
  std::string name = word();
  if (rng.bernoulli(0.25)) name += " " + word();
  return name;
}

std::vector<std::string> named_elements(const std::string& question, const std::string& model) {
  const size_t data_at = model.find("data;");
  if (data_at == std::string::npos) return {};
  std::vector<std::string> out;
  std::set<std::string> seen;
  const std::string lower_question = to_lower(question);
  for (const DataStatement& s : parse_data_section(model.substr(data_at + 5))) {
    if (s.kind != DataStatement::set) continue;
    const std::vector<std::string> tokens = statement_tokens(s.raw);
    auto assign = std::find(tokens.begin(), tokens.end(), ":=");
    if (assign == tokens.end()) continue;
    for (auto it = assign + 1; it != tokens.end(); ++it) {
      const std::string& e = *it;
      const bool symbol_chars = std::all_of(e.begin(), e.end(), word_char);
      const bool has_letter = std::any_of(
          e.begin(), e.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
      if (e.size() < 3 || !symbol_chars || !has_letter || seen.count(e)) continue;
      const std::vector<std::string> written = {e, spaced(e), text::plural(e),
                                                text::plural(spaced(e))};
      const bool mentioned =
          std::any_of(written.begin(), written.end(), [&](const std::string& form) {
            return !whole_word_at(lower_question, to_lower(form)).empty();
          });
      if (!mentioned) continue;
      seen.insert(e);
      out.push_back(e);
    }
  }
  return out;
}

std::vector<size_t> word_occurrences(const std::string& text, const std::string& phrase) {
  return whole_word_at(to_lower(text), to_lower(phrase));
}

std::string name_key(const std::string& element) {
  return to_lower(spaced(element));
}

std::string EntityRenaming::apply(const std::string& text, Written as) const {
  struct Match {
    size_t begin, end;
    std::string replacement;
  };
  std::vector<Match> matches;
  const std::string lower_text = to_lower(text);
  for (const auto& [from, to] : names)
    for (const auto& [old_form, new_form] : form_pairs(from, to, as))
      for (size_t at : whole_word_at(lower_text, to_lower(old_form))) {
        // "Dining chairs" at the start of a sentence stays capitalised.
        const bool upper = std::isupper(static_cast<unsigned char>(text[at]));
        matches.push_back(
            {at, at + old_form.size(), upper ? text::capitalize(new_form) : new_form});
      }
  // Longest first where two start together (the text's own form first among
  // equals: a stable sort); then left to right, no overlaps.
  std::stable_sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::string out;
  size_t at = 0;
  for (const Match& m : matches) {
    if (m.begin < at) continue;
    out.append(text, at, m.begin - at);
    out += m.replacement;
    at = m.end;
  }
  out.append(text, at, std::string::npos);
  return out;
}

std::optional<EntityRenaming> plan_renaming(
    const std::string& question, const std::string& model,
    const std::vector<std::pair<std::string, Written>>& others, NameSource source, Rng& rng,
    const std::set<std::string>& excluded) {
  const std::vector<std::string> old_names = named_elements(question, model);
  if (old_names.empty()) return std::nullopt;
  std::vector<std::pair<std::string, Written>> all_texts = others;
  all_texts.emplace_back(question, Written::prose);
  all_texts.emplace_back(model, Written::symbols);

  // The model must write each old element in one case only: "Labour" and
  // "labour" would both become the same capitalised new name.
  const std::string lower_model = to_lower(model);
  for (const std::string& e : old_names)
    for (size_t at : whole_word_at(lower_model, to_lower(e)))
      if (model.compare(at, e.size(), e) != 0) return std::nullopt;

  std::set<std::string> taken = excluded;  // name_key()s of old, excluded and chosen names
  for (const std::string& e : old_names) taken.insert(name_key(e));
  auto clean = [&](const std::string& name) {
    if (taken.count(name_key(name))) return false;
    for (const std::string& e : old_names)  // "oak" would still be found in "oak timber"
      if (mentions(name, spaced(e)) || mentions(spaced(e), name)) return false;
    for (const std::string& form : forms(underscored(name)))
      for (const auto& [t, as] : all_texts)
        if (mentions(t, form)) return false;
    return true;
  };
  const std::vector<std::string>& pool = pooled_names();
  EntityRenaming renaming;
  renaming.source = source;
  for (const std::string& e : old_names) {
    std::string chosen;
    for (int attempt = 0; attempt < 50 && chosen.empty(); ++attempt) {
      std::string name = source == NameSource::invented ? invented_name(rng) : rng.pick(pool);
      if (clean(name)) chosen = std::move(name);
    }
    if (chosen.empty()) return std::nullopt;
    taken.insert(name_key(chosen));
    renaming.names.emplace_back(e, underscored(chosen));
  }
  for (const auto& [t, as] : all_texts) {
    const std::string renamed = renaming.apply(t, as);
    for (const auto& [from, to] : renaming.names)
      if (mentions(renamed, from) || mentions(renamed, spaced(from)) ||
          mentions(renamed, latex(from)))
        return std::nullopt;
  }
  return renaming;
}

}  // namespace trex::orlib
