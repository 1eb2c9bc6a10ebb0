#pragma once
// What every family shares: its phrasing templates are the entries of a
// table of themes (`themes()` in the family's file), an instance is written in
// one of them, and its story names an organisation. The template is chosen at
// generation time so that names and units agree across the representations.
#include <cstddef>
#include <string>
#include <type_traits>

#include "trex/or/families/family.hpp"
#include "trex/or/families/phrasing.hpp"

namespace trex::orlib {

// `themes` is the family's `const std::vector<Theme>& themes()`.
template <auto themes>
class ThemedInstance : public Instance {
 public:
  using Theme = typename std::remove_cvref_t<decltype(themes())>::value_type;

  int template_id = 0;  // index into themes()
  std::string org;      // the organisation the story names

  const Theme& theme() const { return themes()[static_cast<size_t>(template_id)]; }
  int nl_template() const override { return template_id; }
};

// A themed instance whose word problem is composed (phrasing.hpp): the theme
// fixes the story, the instance's own style seed every other choice.
template <auto themes>
class ComposedInstance : public ThemedInstance<themes> {
 public:
  std::string nl() const final {
    text::Style style = phrasing();
    return compose(style);
  }
  uint64_t surface_form() const final {
    text::Style style = phrasing();
    compose(style);
    return hash_combine(style.form(), static_cast<uint64_t>(this->template_id));
  }

 protected:
  // Writes the word problem with every choice taken from `style`.
  virtual std::string compose(text::Style& style) const = 0;

 private:
  // Seeded by the instance's data and template, so every call renders the same text.
  text::Style phrasing() const {
    return text::Style(
        hash_combine(hash_string(this->gmpl()), static_cast<uint64_t>(this->template_id)));
  }
};

template <auto themes>
class ThemedFamily : public Family {
 public:
  int nl_templates() const override { return static_cast<int>(themes().size()); }
};

}  // namespace trex::orlib
