#pragma once
// Helpers for the R-NL representation: realistic name pools, English lists,
// Markdown tables and number formatting. Names drawn from the pools are also
// valid MathProg symbols after `symbol()`.
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trex/core/rng.hpp"

namespace trex::orlib::text {

// Pools of realistic names. Each pool has at least 30 entries.
const std::vector<std::string>& companies();
const std::vector<std::string>& products();  // manufactured goods
const std::vector<std::string>& cities();
const std::vector<std::string>& people();  // first names
const std::vector<std::string>& foods();
const std::vector<std::string>& nutrients();
const std::vector<std::string>& resources();    // machines, labour, materials
const std::vector<std::string>& projects();     // investment / project names
const std::vector<std::string>& assets();       // financial assets
const std::vector<std::string>& ingredients();  // blending inputs
const std::vector<std::string>& tasks();        // job / task names

// k distinct entries of `pool`, in random order.
std::vector<std::string> pick_distinct(Rng& rng, const std::vector<std::string>& pool, size_t k);

// A MathProg-safe symbol for a display name: spaces and dashes become '_', other
// non-alphanumerics are dropped; a leading digit gets a prefix.
std::string symbol(const std::string& display_name);
std::vector<std::string> symbols(const std::vector<std::string>& display_names);

// "a", "a and b", "a, b and c"
std::string english_list(const std::vector<std::string>& items, const std::string& conj = "and");
// Markdown table with a header row.
std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows);
// Markdown table of a square matrix with `labels` on both axes and "-" on the
// diagonal (distances between places).
std::string markdown_matrix(const std::vector<std::string>& labels,
                            const std::vector<std::vector<double>>& values);
// Number as text (integers without decimals).
std::string num(double v);
// Money: "$1,250" / "$12.50"
std::string money(double v);
// "a" or "an" for the word that follows.
std::string article(const std::string& word);
// `pattern` with each placeholder replaced in turn by its value:
// fill("{org} ships to {to}.", {{"{org}", org}, {"{to}", city}}).
std::string fill(std::string pattern,
                 std::initializer_list<std::pair<std::string_view, std::string_view>> values);
// English plural of a noun (of its last word): "plant" -> "plants", "refinery" ->
// "refineries", "bus" -> "buses", "branch" -> "branches".
std::string plural(const std::string& noun);
// Capitalises the first letter.
std::string capitalize(std::string s);

}  // namespace trex::orlib::text
