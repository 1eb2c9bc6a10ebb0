#include "trex/io/tokenizer_regex.hpp"

#include <algorithm>
#include <array>
#include <memory>

#include "trex/core/error.hpp"

namespace trex::io {

namespace unicode {

namespace {

// Categories of the Basic Multilingual Plane, looked up once (64 KiB); other planes search the
// range table.
const std::array<Category, 0x10000>& bmp_table() {
  static const std::array<Category, 0x10000> table = [] {
    std::array<Category, 0x10000> t;
    t.fill(Category::Cn);
    for (std::size_t i = 0; i < kCategoryRangeCount; ++i) {
      const CategoryRange& r = kCategoryRanges[i];
      if (r.first > 0xFFFF) break;
      for (char32_t cp = r.first; cp <= std::min<char32_t>(r.last, 0xFFFF); ++cp)
        t[cp] = r.category;
    }
    return t;
  }();
  return table;
}

}  // namespace

Category category(char32_t cp) {
  if (cp <= 0xFFFF) return bmp_table()[cp];
  const CategoryRange* begin = kCategoryRanges;
  const CategoryRange* end = kCategoryRanges + kCategoryRangeCount;
  const CategoryRange* it = std::upper_bound(
      begin, end, cp, [](char32_t c, const CategoryRange& r) { return c < r.first; });
  if (it == begin) return Category::Cn;
  --it;
  return cp <= it->last ? it->category : Category::Cn;
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid; `subpart`
// receives the length of the maximal valid prefix of an invalid sequence (at least 1).
std::size_t utf8_sequence(std::string_view s, std::size_t i, char32_t& cp, std::size_t& subpart) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  subpart = 1;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char b = byte(i + k);
    if (b < lo || b > hi) return 0;
    lo = 0x80, hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
    subpart = k + 1;
  }
  return need + 1;
}

}  // namespace

void decode_utf8(std::string_view text, std::vector<char32_t>& code_points,
                 std::vector<uint32_t>& byte_offsets) {
  code_points.clear();
  byte_offsets.clear();
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    std::size_t subpart = 1;
    const std::size_t n = utf8_sequence(text, i, cp, subpart);
    byte_offsets.push_back(static_cast<uint32_t>(i));
    if (n == 0) {
      code_points.push_back(0xFFFD);
      i += 1;
    } else {
      code_points.push_back(cp);
      i += n;
    }
  }
  byte_offsets.push_back(static_cast<uint32_t>(text.size()));
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    char32_t cp = 0;
    std::size_t subpart = 1;
    const std::size_t n = utf8_sequence(bytes, i, cp, subpart);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += subpart;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace unicode

// ----------------------------------------------------------------------------------------------
// Character classes

bool Regex::CharClass::matches_slow(char32_t cp) const {
  bool in = false;
  if (category_mask != 0 && (category_mask >> static_cast<int>(unicode::category(cp))) & 1u)
    in = true;
  if (!in && white_space && unicode::is_white_space(cp)) in = true;
  if (!in) {
    for (const auto& [lo, hi] : ranges) {
      if (cp >= lo && cp <= hi) {
        in = true;
        break;
      }
      if (ignore_case && cp < 128) {
        const char32_t other = (cp >= 'a' && cp <= 'z')   ? cp - 32
                               : (cp >= 'A' && cp <= 'Z') ? cp + 32
                                                          : cp;
        if (other >= lo && other <= hi) {
          in = true;
          break;
        }
      }
    }
  }
  if (!in) {
    for (const CharClass& sub : negated_items) {
      if (sub.matches_slow(cp)) {
        in = true;
        break;
      }
    }
  }
  return in != negated;
}

void Regex::CharClass::finalize() {
  for (CharClass& sub : negated_items) sub.finalize();
  ascii_bits[0] = ascii_bits[1] = 0;
  for (char32_t cp = 0; cp < 128; ++cp) {
    if (matches_slow(cp)) ascii_bits[cp >> 6] |= uint64_t{1} << (cp & 63);
  }
}

bool Regex::CharClass::matches(char32_t cp) const {
  if (cp < 128) return (ascii_bits[cp >> 6] >> (cp & 63)) & 1u;
  return matches_slow(cp);
}

// ----------------------------------------------------------------------------------------------
// Parser: pattern -> syntax tree -> program

namespace {

struct Node {
  enum Kind { kClass, kConcat, kAlternate, kRepeat, kLookahead, kAnchor } kind;
  std::vector<std::unique_ptr<Node>> children;
  int class_index = -1;
  int min = 0, max = 0;  // max < 0: unbounded
  bool greedy = true;
  bool negative = false;  // lookahead
  Regex::Op anchor = Regex::Op::kMatch;
};

uint32_t category_mask_for(std::string_view name) {
  using unicode::Category;
  static const char* names[unicode::kCategoryCount] = {
      "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
      "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
  static const std::pair<std::string_view, std::string_view> long_names[] = {
      {"Letter", "L"}, {"Mark", "M"},      {"Number", "N"}, {"Punctuation", "P"},
      {"Symbol", "S"}, {"Separator", "Z"}, {"Other", "C"}};
  for (const auto& [long_name, short_name] : long_names) {
    if (name == long_name) name = short_name;
  }
  uint32_t mask = 0;
  for (int c = 0; c < unicode::kCategoryCount; ++c) {
    const std::string_view n = names[c];
    if ((name.size() == 1 && n[0] == name[0]) || n == name) mask |= 1u << c;
  }
  return mask;
}

}  // namespace

struct RegexCompiler {
  std::string_view p;
  std::size_t i = 0;
  Regex& re;
  bool ignore_case = false;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("regex: " + what + " at offset " + std::to_string(i) + " in pattern \"" +
                std::string(p) + "\"")
        .field("pre_tokenizer.pattern");
  }
  bool at_end() const { return i >= p.size(); }
  char peek() const { return p[i]; }

  char32_t next_code_point() {
    std::vector<char32_t> cps;
    std::vector<uint32_t> offs;
    std::size_t len = 1;
    const unsigned char b = static_cast<unsigned char>(p[i]);
    if (b >= 0xF0) {
      len = 4;
    } else if (b >= 0xE0) {
      len = 3;
    } else if (b >= 0xC0) {
      len = 2;
    }
    if (i + len > p.size()) fail("truncated UTF-8");
    unicode::decode_utf8(p.substr(i, len), cps, offs);
    if (cps.size() != 1) fail("invalid UTF-8");
    i += len;
    return cps[0];
  }

  int add_class(Regex::CharClass cls) {
    cls.ignore_case = cls.ignore_case || ignore_case;
    cls.finalize();
    re.classes_.push_back(std::move(cls));
    return static_cast<int>(re.classes_.size()) - 1;
  }

  std::unique_ptr<Node> class_node(Regex::CharClass cls) {
    auto node = std::make_unique<Node>();
    node->kind = Node::kClass;
    node->class_index = add_class(std::move(cls));
    return node;
  }

  uint32_t parse_hex(std::size_t max_digits) {
    uint32_t value = 0;
    std::size_t n = 0;
    while (!at_end() && n < max_digits && std::isxdigit(static_cast<unsigned char>(peek()))) {
      const char c = peek();
      value = value * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c))
                                                     ? c - '0'
                                                     : (std::tolower(c) - 'a' + 10));
      ++i, ++n;
    }
    if (n == 0) fail("expected hex digits");
    return value;
  }

  // After a backslash. Either a single code point (returned, `cls` untouched) or a class
  // escape (`is_class` set, `cls` filled).
  char32_t parse_escape(bool& is_class, Regex::CharClass& cls) {
    if (at_end()) fail("trailing backslash");
    const char c = p[i++];
    is_class = false;
    switch (c) {
      case 't':
        return '\t';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'a':
        return 0x07;
      case 'e':
        return 0x1B;
      case '0':
        return 0;
      case 'x':
        if (!at_end() && peek() == '{') {
          ++i;
          const uint32_t v = parse_hex(8);
          if (at_end() || peek() != '}') fail("expected }");
          ++i;
          return v;
        }
        return parse_hex(2);
      case 'u':
        return parse_hex(4);
      case 's':
      case 'S':
        is_class = true;
        cls.white_space = true;
        cls.negated = (c == 'S');
        return 0;
      case 'd':
      case 'D':
        is_class = true;
        cls.category_mask = 1u << static_cast<int>(unicode::Category::Nd);
        cls.negated = (c == 'D');
        return 0;
      case 'w':
      case 'W':
        is_class = true;
        cls.category_mask = category_mask_for("L") | category_mask_for("M") |
                            category_mask_for("Nd") | category_mask_for("Pc");
        cls.negated = (c == 'W');
        return 0;
      case 'p':
      case 'P': {
        if (at_end() || peek() != '{') fail("expected { after \\p");
        const std::size_t close = p.find('}', i);
        if (close == std::string_view::npos) fail("unterminated \\p{");
        std::string_view name = p.substr(i + 1, close - i - 1);
        bool negate = (c == 'P');
        if (!name.empty() && name[0] == '^') negate = !negate, name.remove_prefix(1);
        const uint32_t mask = category_mask_for(name);
        if (mask == 0) fail("unsupported property \\p{" + std::string(name) + "}");
        i = close + 1;
        is_class = true;
        cls.category_mask = mask;
        cls.negated = negate;
        return 0;
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(c)))
          fail(std::string("unsupported escape \\") + c);
        --i;
        return next_code_point();
    }
  }

  std::unique_ptr<Node> parse_bracket() {
    // at '[' already consumed
    Regex::CharClass cls;
    if (!at_end() && peek() == '^') cls.negated = true, ++i;
    bool first = true;
    while (true) {
      if (at_end()) fail("unterminated [");
      if (peek() == ']' && !first) {
        ++i;
        break;
      }
      if (peek() == '[') fail("nested classes are not supported");
      first = false;
      char32_t lo;
      if (peek() == '\\') {
        ++i;
        bool is_class = false;
        Regex::CharClass item;
        lo = parse_escape(is_class, item);
        if (is_class) {
          if (item.negated) {
            item.negated = false;
            Regex::CharClass wrapper;
            wrapper.negated = true;
            wrapper.category_mask = item.category_mask;
            wrapper.white_space = item.white_space;
            cls.negated_items.push_back(std::move(wrapper));
          } else {
            cls.category_mask |= item.category_mask;
            cls.white_space = cls.white_space || item.white_space;
          }
          continue;
        }
      } else {
        lo = next_code_point();
      }
      char32_t hi = lo;
      if (i + 1 < p.size() && peek() == '-' && p[i + 1] != ']') {
        ++i;
        if (peek() == '\\') {
          ++i;
          bool is_class = false;
          Regex::CharClass item;
          hi = parse_escape(is_class, item);
          if (is_class) fail("class escape as range end");
        } else {
          hi = next_code_point();
        }
        if (hi < lo) fail("reversed range");
      }
      cls.ranges.emplace_back(lo, hi);
    }
    return class_node(std::move(cls));
  }

  std::unique_ptr<Node> parse_atom() {
    const char c = peek();
    if (c == '(') {
      ++i;
      bool saved_case = ignore_case;
      std::unique_ptr<Node> inner;
      if (p.substr(i, 2) == "?:") {
        i += 2;
        inner = parse_alternation();
      } else if (p.substr(i, 3) == "?i:") {
        i += 3;
        ignore_case = true;
        inner = parse_alternation();
      } else if (p.substr(i, 2) == "?=" || p.substr(i, 2) == "?!") {
        const bool negative = p[i + 1] == '!';
        i += 2;
        auto look = std::make_unique<Node>();
        look->kind = Node::kLookahead;
        look->negative = negative;
        look->children.push_back(parse_alternation());
        inner = std::move(look);
      } else if (!at_end() && peek() == '?') {
        fail("unsupported group syntax");
      } else {
        inner = parse_alternation();  // capturing groups behave as plain groups here
      }
      ignore_case = saved_case;
      if (at_end() || peek() != ')') fail("missing )");
      ++i;
      return inner;
    }
    if (c == '[') {
      ++i;
      return parse_bracket();
    }
    if (c == '.') {
      ++i;
      Regex::CharClass cls;
      cls.negated = true;
      cls.ranges.emplace_back('\n', '\n');
      return class_node(std::move(cls));
    }
    if (c == '^' || c == '$') {
      ++i;
      auto node = std::make_unique<Node>();
      node->kind = Node::kAnchor;
      node->anchor = c == '^' ? Regex::Op::kLineStart : Regex::Op::kLineEnd;
      return node;
    }
    if (c == '\\') {
      ++i;
      if (!at_end() && (peek() == 'A' || peek() == 'z')) {
        auto node = std::make_unique<Node>();
        node->kind = Node::kAnchor;
        node->anchor = peek() == 'A' ? Regex::Op::kTextStart : Regex::Op::kTextEnd;
        ++i;
        return node;
      }
      bool is_class = false;
      Regex::CharClass cls;
      const char32_t cp = parse_escape(is_class, cls);
      if (!is_class) cls.ranges.emplace_back(cp, cp);
      return class_node(std::move(cls));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("quantifier without operand");
    Regex::CharClass cls;
    const char32_t cp = next_code_point();
    cls.ranges.emplace_back(cp, cp);
    return class_node(std::move(cls));
  }

  bool parse_int(int& out) {
    const std::size_t start = i;
    out = 0;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(peek())))
      out = out * 10 + (p[i++] - '0');
    return i > start;
  }

  std::unique_ptr<Node> parse_repeat() {
    auto atom = parse_atom();
    while (!at_end()) {
      int min = 0, max = 0;
      const char c = peek();
      if (c == '*') {
        min = 0, max = -1, ++i;
      } else if (c == '+') {
        min = 1, max = -1, ++i;
      } else if (c == '?') {
        min = 0, max = 1, ++i;
      } else if (c == '{') {
        const std::size_t save = i;
        ++i;
        if (!parse_int(min)) {
          i = save;
          break;
        }
        max = min;
        if (!at_end() && peek() == ',') {
          ++i;
          if (!parse_int(max)) max = -1;
        }
        if (at_end() || peek() != '}') fail("bad {n,m} quantifier");
        ++i;
        if (max >= 0 && max < min) fail("{n,m} with m < n");
      } else {
        break;
      }
      bool greedy = true;
      if (!at_end() && peek() == '?') greedy = false, ++i;
      if (!at_end() && peek() == '+') fail("possessive quantifiers are not supported");
      auto rep = std::make_unique<Node>();
      rep->kind = Node::kRepeat;
      rep->min = min, rep->max = max, rep->greedy = greedy;
      rep->children.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }

  std::unique_ptr<Node> parse_concat() {
    auto node = std::make_unique<Node>();
    node->kind = Node::kConcat;
    while (!at_end() && peek() != '|' && peek() != ')') node->children.push_back(parse_repeat());
    return node;
  }

  std::unique_ptr<Node> parse_alternation() {
    auto first = parse_concat();
    if (at_end() || peek() != '|') return first;
    auto node = std::make_unique<Node>();
    node->kind = Node::kAlternate;
    node->children.push_back(std::move(first));
    while (!at_end() && peek() == '|') {
      ++i;
      node->children.push_back(parse_concat());
    }
    return node;
  }

  static bool nullable(const Node& n) {
    switch (n.kind) {
      case Node::kClass:
        return false;
      case Node::kConcat:
        return std::all_of(n.children.begin(), n.children.end(),
                           [](const auto& c) { return nullable(*c); });
      case Node::kAlternate:
        return std::any_of(n.children.begin(), n.children.end(),
                           [](const auto& c) { return nullable(*c); });
      case Node::kRepeat:
        return n.min == 0 || nullable(*n.children[0]);
      default:
        return true;
    }
  }

  int emit(Regex::Op op, int32_t x = 0, int32_t y = 0) {
    re.program_.push_back({op, x, y});
    return static_cast<int>(re.program_.size()) - 1;
  }
  int pc() const { return static_cast<int>(re.program_.size()); }

  void compile(const Node& n) {
    switch (n.kind) {
      case Node::kClass:
        emit(Regex::Op::kClass, n.class_index);
        break;
      case Node::kAnchor:
        emit(n.anchor);
        break;
      case Node::kConcat:
        for (const auto& c : n.children) compile(*c);
        break;
      case Node::kAlternate: {
        std::vector<int> jumps;
        for (std::size_t k = 0; k < n.children.size(); ++k) {
          if (k + 1 < n.children.size()) {
            const int split = emit(Regex::Op::kSplit);
            re.program_[split].x = pc();
            compile(*n.children[k]);
            jumps.push_back(emit(Regex::Op::kJump));
            re.program_[split].y = pc();
          } else {
            compile(*n.children[k]);
          }
        }
        for (int j : jumps) re.program_[j].x = pc();
        break;
      }
      case Node::kRepeat: {
        const Node& body = *n.children[0];
        if (n.max < 0 && nullable(body)) fail("unbounded repetition of an empty-matching group");
        for (int k = 0; k < n.min; ++k) compile(body);
        if (n.max < 0) {
          const int split = emit(Regex::Op::kSplit);
          compile(body);
          emit(Regex::Op::kJump, split);
          set_split(split, split + 1, pc(), n.greedy);
        } else {
          std::vector<int> splits;
          for (int k = n.min; k < n.max; ++k) {
            splits.push_back(emit(Regex::Op::kSplit));
            compile(body);
          }
          for (int s : splits) set_split(s, s + 1, pc(), n.greedy);
        }
        break;
      }
      case Node::kLookahead: {
        const int look = emit(Regex::Op::kLookahead, 0, n.negative ? 1 : 0);
        const int skip = emit(Regex::Op::kJump);
        re.program_[look].x = pc();
        compile(*n.children[0]);
        emit(Regex::Op::kMatch);
        re.program_[skip].x = pc();
        break;
      }
    }
  }

  void set_split(int split, int32_t take, int32_t skip, bool greedy) {
    re.program_[split].x = greedy ? take : skip;
    re.program_[split].y = greedy ? skip : take;
  }
};

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  RegexCompiler compiler{pattern, 0, *this};
  auto tree = compiler.parse_alternation();
  if (!compiler.at_end()) compiler.fail("unbalanced )");
  compiler.compile(*tree);
  compiler.emit(Op::kMatch);

  std::vector<int32_t> work{0};
  std::vector<bool> seen(program_.size(), false);
  has_first_filter_ = true;
  while (!work.empty() && has_first_filter_) {
    const int32_t pc = work.back();
    work.pop_back();
    if (seen[static_cast<std::size_t>(pc)]) continue;
    seen[static_cast<std::size_t>(pc)] = true;
    const Inst& in = program_[static_cast<std::size_t>(pc)];
    switch (in.op) {
      case Op::kClass:
        first_classes_.push_back(in.x);
        break;
      case Op::kSplit:
        work.push_back(in.x);
        work.push_back(in.y);
        break;
      case Op::kJump:
        work.push_back(in.x);
        break;
      default:
        has_first_filter_ = false;
        break;  // anchors, lookahead, empty match
    }
  }
  for (int32_t c : first_classes_) {
    first_ascii_[0] |= classes_[static_cast<std::size_t>(c)].ascii_bits[0];
    first_ascii_[1] |= classes_[static_cast<std::size_t>(c)].ascii_bits[1];
  }
}

bool Regex::can_start(char32_t cp) const {
  if (!has_first_filter_) return true;
  if (cp < 128) return (first_ascii_[cp >> 6] >> (cp & 63)) & 1u;
  for (int32_t c : first_classes_) {
    if (classes_[static_cast<std::size_t>(c)].matches(cp)) return true;
  }
  return false;
}

// Backtracking VM: a depth-first search over (pc, position) in priority order, which gives
// the leftmost-first (Perl / Oniguruma) semantics. A lookahead instruction is followed by a
// jump over its body; the body ends with its own kMatch.
int64_t Regex::match_at(int32_t start_pc, const char32_t* text, uint32_t size,
                        uint32_t start) const {
  thread_local std::vector<std::pair<int32_t, uint32_t>> stack_storage;
  const std::size_t base = stack_storage.size();
  stack_storage.emplace_back(start_pc, start);
  int64_t result = -1;
  while (stack_storage.size() > base) {
    auto [pc, pos] = stack_storage.back();
    stack_storage.pop_back();
    while (true) {
      const Inst& in = program_[static_cast<std::size_t>(pc)];
      bool ok = true;
      switch (in.op) {
        case Op::kClass:
          if (pos < size && classes_[static_cast<std::size_t>(in.x)].matches(text[pos])) {
            ++pos, ++pc;
          } else {
            ok = false;
          }
          break;
        case Op::kSplit:
          stack_storage.emplace_back(in.y, pos);
          pc = in.x;
          break;
        case Op::kJump:
          pc = in.x;
          break;
        case Op::kMatch:
          result = pos;
          stack_storage.resize(base);
          return result;
        case Op::kLookahead: {
          const bool found = match_at(in.x, text, size, pos) >= 0;
          if (found == (in.y == 0)) {
            ++pc;
          } else {
            ok = false;
          }
          break;
        }
        case Op::kLineStart:
          ok = pos == 0 || text[pos - 1] == '\n';
          ++pc;
          break;
        case Op::kLineEnd:
          ok = pos == size || text[pos] == '\n';
          ++pc;
          break;
        case Op::kTextStart:
          ok = pos == 0;
          ++pc;
          break;
        case Op::kTextEnd:
          ok = pos == size;
          ++pc;
          break;
      }
      if (!ok) break;
    }
  }
  return result;
}

std::vector<std::pair<uint32_t, uint32_t>> Regex::find_all(const char32_t* text,
                                                           uint32_t size) const {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t pos = 0;
  while (pos <= size) {
    while (pos < size && !can_start(text[pos])) ++pos;
    if (pos == size && has_first_filter_) break;
    const int64_t end = match_at(0, text, size, pos);
    if (end < 0) {
      ++pos;
      continue;
    }
    if (static_cast<uint32_t>(end) == pos) {
      ++pos;  // empty match: not a piece; search again one code point later
      continue;
    }
    out.emplace_back(pos, static_cast<uint32_t>(end));
    pos = static_cast<uint32_t>(end);
  }
  return out;
}

}  // namespace trex::io
