#pragma once
// Small string helpers shared across modules.
#include <string>
#include <string_view>
#include <vector>

namespace trex {

std::vector<std::string> split(std::string_view text, char sep);
std::string trim(std::string_view text);
// Runs of whitespace become one space; leading and trailing whitespace is dropped.
std::string collapse_whitespace(std::string_view text);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
bool starts_with(std::string_view text, std::string_view prefix);
std::string to_lower(std::string_view text);
// Length of the well-formed UTF-8 sequence at text[i], or -(length of the
// maximal ill-formed subpart) when it is not well formed (Unicode 3.9, D93b).
long utf8_sequence(std::string_view text, size_t i);
// Appends code point cp (<= U+10FFFF) as UTF-8.
void append_utf8(char32_t cp, std::string& out);
std::string replace_all(std::string text, std::string_view from, std::string_view to);

// Shortest decimal text that parses back to exactly `v` (integers without ".0").
std::string format_number(double v);
// Fixed number of decimals, trailing zeros removed ("12.50" -> "12.5").
std::string format_fixed(double v, int decimals);
// 16 lower-case hex digits.
std::string hex64(unsigned long long v);

}  // namespace trex
