#pragma once
// The regular-expression subset that HF tokenizer.json pre-tokenizers use, on Unicode code
// points, with Oniguruma's (HF `tokenizers`') leftmost-first backtracking semantics. Written
// instead of std::regex, which has no \p{..} classes and is slow. See docs/tokenizer.md for the
// supported syntax.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trex/core/strings.hpp"

namespace trex::io {

namespace unicode {

// Unicode general categories (the order of the generated table's enum values).
enum class Category : uint8_t {
  Lu,
  Ll,
  Lt,
  Lm,
  Lo,
  Mn,
  Mc,
  Me,
  Nd,
  Nl,
  No,
  Pc,
  Pd,
  Ps,
  Pe,
  Pi,
  Pf,
  Po,
  Sm,
  Sc,
  Sk,
  So,
  Zs,
  Zl,
  Zp,
  Cc,
  Cf,
  Cs,
  Co,
  Cn
};
constexpr int kCategoryCount = 30;

struct CategoryRange {
  char32_t first;
  char32_t last;
  Category category;
};
// Generated from Python's unicodedata (src/trex/io/tokenizer_unicode_tables.cpp).
extern const CategoryRange kCategoryRanges[];
extern const std::size_t kCategoryRangeCount;

Category category(char32_t cp);
// The White_Space property (what Oniguruma's \s and Rust's char::is_whitespace match).
bool is_white_space(char32_t cp);

// Decodes UTF-8 into code points plus the byte offset of each (and one past the end). An
// invalid byte decodes as U+FFFD covering that single byte, so every input splits somewhere.
void decode_utf8(std::string_view text, std::vector<char32_t>& code_points,
                 std::vector<uint32_t>& byte_offsets);
using ::trex::append_utf8;  // core/strings.hpp
// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace unicode

// A compiled pattern. Supported: literals and escapes (\t \n \r \f \v \xHH \x{H..} \uHHHH and
// escaped punctuation), classes [..] / [^..] with ranges, \p{X} / \P{X} (general categories
// and their one-letter groups), \s \S \d \D \w \W, `.`, alternation, groups ( ), (?: ), (?i: )
// (ASCII case folding), lookahead (?= ) (?! ), quantifiers * + ? {n} {n,} {n,m} (greedy or
// lazy), and the anchors ^ $ (line anchors, as in Oniguruma's Ruby syntax) \A \z.
class Regex {
 public:
  explicit Regex(std::string_view pattern);

  // All non-overlapping matches in `text`, leftmost-first, as [begin, end) code point indices.
  // Empty matches are skipped (as `tokenizers`' Split does).
  std::vector<std::pair<uint32_t, uint32_t>> find_all(const char32_t* text, uint32_t size) const;

  const std::string& pattern() const { return pattern_; }

  struct CharClass {
    bool negated = false;
    bool ignore_case = false;
    uint32_t category_mask = 0;  // bit per unicode::Category
    bool white_space = false;
    std::vector<std::pair<char32_t, char32_t>> ranges;
    std::vector<CharClass> negated_items;  // \S, \P{..}, \D, \W inside a class
    uint64_t ascii_bits[2] = {0, 0};       // precomputed answer for code points < 128
    bool matches(char32_t cp) const;
    bool matches_slow(char32_t cp) const;
    void finalize();
  };

  enum class Op : uint8_t {
    kClass,
    kSplit,
    kJump,
    kMatch,
    kLookahead,
    kLineStart,
    kLineEnd,
    kTextStart,
    kTextEnd
  };
  struct Inst {
    Op op;
    int32_t x = 0;  // class index, jump target, preferred branch, lookahead body
    int32_t y = 0;  // other branch; lookahead: 1 when negative
  };

 private:
  friend struct RegexCompiler;
  // Longest-priority match starting at `pos`, or -1.
  int64_t match_at(int32_t pc, const char32_t* text, uint32_t size, uint32_t pos) const;

  std::string pattern_;
  std::vector<Inst> program_;
  std::vector<CharClass> classes_;
  // The classes a match can begin with (when every path starts with one), so find_all can skip
  // positions where no match can start without running the VM.
  bool has_first_filter_ = false;
  std::vector<int32_t> first_classes_;
  uint64_t first_ascii_[2] = {0, 0};
  bool can_start(char32_t cp) const;
};

}  // namespace trex::io
