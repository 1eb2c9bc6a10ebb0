#include "trex/or/eval/extract.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib::eval {
namespace {

struct Line {
  size_t begin = 0;  // offset of the first character
  size_t end = 0;    // offset of the '\n' (or text end)
};

std::vector<Line> split_lines(std::string_view text) {
  std::vector<Line> lines;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n') {
      lines.push_back({start, i});
      start = i + 1;
    }
  }
  return lines;
}

std::string_view view(std::string_view text, const Line& l) {
  std::string_view s = text.substr(l.begin, l.end - l.begin);
  if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
  return s;
}

std::string_view ltrim(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

std::string_view strip(std::string_view s) {
  s = ltrim(s);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool istarts(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && istarts(a, b);
}

// Starts with `word` followed by a non-identifier character (or the end).
bool starts_word(std::string_view s, std::string_view word) {
  if (!istarts(s, word)) return false;
  if (s.size() == word.size()) return true;
  unsigned char c = static_cast<unsigned char>(s[word.size()]);
  return !(std::isalnum(c) || c == '_');
}

struct Block {
  size_t start = 0;  // offset of the opening marker (ordering)
  std::string tag;   // lowercased first word of the info string / tag name
  std::string content;
  bool closed = true;
  bool xml_tag = false;
};

std::string first_word(std::string_view info) {
  std::string out;
  size_t i = 0;
  while (i < info.size() && (info[i] == '{' || info[i] == '.' || info[i] == ' ')) ++i;
  for (; i < info.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(info[i]);
    if (std::isalnum(c) || c == '_' || c == '-' || c == '+')
      out += static_cast<char>(std::tolower(c));
    else
      break;
  }
  return out;
}

// Markdown fences: ``` or ~~~ (3 or more), any indentation; closed by a line
// holding only the same character, at least as many times. Unclosed blocks run
// to the end of the text.
std::vector<Block> fenced_blocks(std::string_view text,
                                 std::vector<std::pair<size_t, size_t>>& spans) {
  std::vector<Block> blocks;
  auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view raw = view(text, lines[i]);
    std::string_view s = ltrim(raw);
    if (s.size() < 3 || (s[0] != '`' && s[0] != '~')) continue;
    const char fc = s[0];
    size_t run = 0;
    while (run < s.size() && s[run] == fc) ++run;
    if (run < 3) continue;
    std::string_view info = s.substr(run);
    if (fc == '`' && info.find('`') != std::string_view::npos) continue;  // inline code span
    const size_t indent = raw.size() - s.size();
    Block b;
    b.start = lines[i].begin;
    b.tag = first_word(info);
    b.closed = false;
    size_t j = i + 1;
    std::string content;
    for (; j < lines.size(); ++j) {
      std::string_view t = strip(view(text, lines[j]));
      if (t.size() >= run && t.find_first_not_of(fc) == std::string_view::npos) {
        b.closed = true;
        break;
      }
      std::string_view body = view(text, lines[j]);
      size_t drop = 0;
      while (drop < indent && drop < body.size() && (body[drop] == ' ' || body[drop] == '\t'))
        ++drop;
      content.append(body.substr(drop));
      content += '\n';
    }
    if (!b.closed)  // the text's final newline is not a blank line of the block
      while (content.size() >= 2 && content[content.size() - 1] == '\n' &&
             content[content.size() - 2] == '\n')
        content.pop_back();
    b.content = std::move(content);
    size_t end = j < lines.size() ? lines[j].end : text.size();
    spans.emplace_back(b.start, end);
    blocks.push_back(std::move(b));
    i = j;  // continue after the closing fence (or the end)
  }
  return blocks;
}

bool inside(const std::vector<std::pair<size_t, size_t>>& spans, size_t pos) {
  for (const auto& [a, b] : spans)
    if (pos >= a && pos < b) return true;
  return false;
}

// SIRL-style <python>...</python> (and <mathprog>, <gmpl>, <ampl>, <lp>, <code>)
// outside fenced blocks and not themselves holding fences.
std::vector<Block> tagged_blocks(std::string_view text,
                                 const std::vector<std::pair<size_t, size_t>>& spans) {
  static const char* kTags[] = {"python", "mathprog", "gmpl", "ampl", "lp", "code"};
  std::vector<Block> blocks;
  std::string lower = to_lower(text);
  for (const char* tag : kTags) {
    const std::string open = std::string("<") + tag + ">";
    const std::string close = std::string("</") + tag + ">";
    size_t pos = 0;
    while ((pos = lower.find(open, pos)) != std::string::npos) {
      size_t body = pos + open.size();
      size_t stop = lower.find(close, body);
      bool closed = stop != std::string::npos;
      if (!closed) stop = text.size();
      std::string_view content = text.substr(body, stop - body);
      if (!inside(spans, pos) && content.find("```") == std::string_view::npos &&
          content.find("~~~") == std::string_view::npos) {
        Block b;
        b.start = pos;
        b.tag = tag == std::string("code") ? "" : tag;
        b.content = std::string(content);
        b.closed = closed;
        b.xml_tag = true;
        blocks.push_back(std::move(b));
      }
      pos = closed ? stop + close.size() : text.size();
    }
  }
  return blocks;
}

struct Scores {
  int python = 0;
  int mathprog = 0;
  int lp = 0;
};

bool is_lp_sense(std::string_view s) {
  for (const char* w :
       {"maximize", "maximise", "maximum", "max", "minimize", "minimise", "minimum", "min"})
    if (iequals(s, w) || (istarts(s, w) && s.size() > std::string_view(w).size() &&
                          s[std::string_view(w).size()] == ' ' && s.back() != ';' &&
                          s.find(':') != std::string_view::npos))
      return true;
  return false;
}

bool is_lp_section(std::string_view s) {
  std::string t = to_lower(s);
  if (!t.empty() && t.back() == ':') t.pop_back();
  for (const char* w :
       {"subject to", "such that", "st", "s.t.", "bounds", "bound", "general", "generals", "gen",
        "integer", "integers", "binary", "binaries", "bin", "end"})
    if (t == w) return true;
  return false;
}

Scores score(std::string_view text) {
  Scores sc;
  auto lines = split_lines(text.substr(0, std::min<size_t>(text.size(), 1u << 20)));
  bool first_meaningful = true;
  for (const Line& l : lines) {
    std::string_view s = strip(view(text, l));
    if (s.empty() || s[0] == '#' || s[0] == '\\') continue;
    const bool semi = s.back() == ';';
    const bool colon_end = s.back() == ':';
    if (first_meaningful && is_lp_sense(s)) sc.lp += 4;
    first_meaningful = false;
    // Python
    if ((starts_word(s, "import") && !semi) ||
        (starts_word(s, "from") && s.find(" import ") != std::string_view::npos))
      sc.python += 3;
    if ((starts_word(s, "def") || starts_word(s, "class")) && colon_end) sc.python += 2;
    if (istarts(s, "print(")) sc.python += 2;
    for (const char* kw : {"for", "if", "while", "with", "elif", "try", "except", "else"})
      if (starts_word(s, kw) && colon_end) {
        sc.python += 2;
        break;
      }
    for (const char* tok : {"pulp.", "gp.", "LpProblem", "addVar", "addConstr", ".solve(",
                            ".optimize(", "Model(", "lpSum", "quicksum"})
      if (s.find(tok) != std::string_view::npos) {
        sc.python += 1;
        break;
      }
    // GNU MathProg / AMPL
    if ((starts_word(s, "set") || starts_word(s, "param") || starts_word(s, "var")) && semi)
      sc.mathprog += starts_word(s, "var") ? 5 : 3;
    if ((starts_word(s, "maximize") || starts_word(s, "minimize")) &&
        s.find(':') != std::string_view::npos && (semi || s.find(':') + 1 < s.size()))
      sc.mathprog += 2;
    if ((starts_word(s, "s.t.") || istarts(s, "s.t.") || starts_word(s, "subject to") ||
         starts_word(s, "subj to")) &&
        s.find(':') != std::string_view::npos && s.size() > 6)
      sc.mathprog += 3;
    if (iequals(s, "solve;") || iequals(s, "end;") || iequals(s, "data;")) sc.mathprog += 2;
    if (s.find("sum{") != std::string_view::npos || s.find("sum {") != std::string_view::npos)
      sc.mathprog += 1;
    // CPLEX LP
    if (is_lp_section(s)) sc.lp += iequals(s, "end") ? 2 : 3;
    if (semi) sc.lp -= 1;
  }
  return sc;
}

CodeKind best_kind(const Scores& sc, CodeKind hint, int threshold) {
  const int best = std::max({sc.python, sc.mathprog, sc.lp});
  if (best < threshold) return CodeKind::none;
  int ties = (sc.python == best) + (sc.mathprog == best) + (sc.lp == best);
  auto score_of = [&](CodeKind k) {
    return k == CodeKind::python ? sc.python : k == CodeKind::mathprog ? sc.mathprog : sc.lp;
  };
  if (ties > 1) return hint != CodeKind::none && score_of(hint) == best ? hint : CodeKind::none;
  if (sc.python == best) return CodeKind::python;
  if (sc.mathprog == best) return CodeKind::mathprog;
  return CodeKind::lp;
}

bool python_code_line(std::string_view raw) {
  if (strip(raw).empty()) return true;
  if (raw[0] == ' ' || raw[0] == '\t') return true;
  std::string_view s = strip(raw);
  if (s[0] == '#' || s[0] == '@' || s[0] == ')' || s[0] == ']' || s[0] == '}') return true;
  for (const char* kw :
       {"import", "from", "def",   "class",    "if",      "elif",   "else",  "for",
        "while",  "with", "try",   "except",   "finally", "return", "print", "raise",
        "assert", "pass", "break", "continue", "del",     "global", "lambda"})
    if (starts_word(s, kw)) return true;
  // name = ..., name.attr(...), name[...] = ..., f(...)
  size_t i = 0;
  while (i < s.size() &&
         (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_' || s[i] == '.' ||
          s[i] == '[' || s[i] == ']' || s[i] == ',' || s[i] == ' ' || s[i] == '\'' || s[i] == '"'))
    ++i;
  if (i == 0 || i >= s.size()) return false;
  std::string_view head = s.substr(0, i);
  if (head.find(' ') != std::string_view::npos && s[i] == '(') return false;  // prose "see (1)"
  return s[i] == '=' || s[i] == '(' || s.substr(i, 2) == "+=" || s.substr(i, 2) == "-=" ||
         s.substr(i, 2) == "*=";
}

// Carves unfenced code of `kind` out of prose; empty when nothing fits.
std::string carve(std::string_view text, CodeKind kind) {
  auto lines = split_lines(text);
  size_t first = lines.size(), last = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view raw = view(text, lines[i]);
    std::string_view s = strip(raw);
    if (s.empty()) continue;
    bool start = false;
    switch (kind) {
      case CodeKind::python:
        start = (starts_word(s, "import") ||
                 (starts_word(s, "from") && s.find(" import ") != std::string_view::npos) ||
                 (starts_word(s, "def") && s.back() == ':'));
        break;
      case CodeKind::mathprog:
        start = (starts_word(s, "set") || starts_word(s, "param") || starts_word(s, "var")) &&
                s.find(';') != std::string_view::npos;
        break;
      case CodeKind::lp:
        start = is_lp_sense(s);
        break;
      case CodeKind::none:
        break;
    }
    if (start) {
      first = i;
      break;
    }
  }
  if (first == lines.size()) return {};
  for (size_t i = first; i < lines.size(); ++i) {
    std::string_view raw = view(text, lines[i]);
    std::string_view s = strip(raw);
    if (kind == CodeKind::python) {
      if (python_code_line(raw)) {
        if (!s.empty()) last = i;
      } else if (!s.empty()) {
        // Prose after the code ends the block (a blank line or two may separate them).
        bool more_code = false;
        for (size_t k = i + 1; k < lines.size() && k <= i + 2; ++k) {
          std::string_view nr = view(text, lines[k]);
          if (!strip(nr).empty() && python_code_line(nr) && (nr[0] == ' ' || nr[0] == '\t'))
            more_code = true;
        }
        if (!more_code) break;
      }
    } else if (kind == CodeKind::mathprog) {
      if (iequals(s, "end;")) {
        last = i;
        break;
      }
      if (!s.empty() &&
          (s.back() == ';' || s.back() == ',' || s.back() == ':' || s.back() == '=' ||
           s.find(":=") != std::string_view::npos || s[0] == '#' || s[0] == '/' || s[0] == '*' ||
           std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '+' || s[0] == '-' ||
           s[0] == '[' || s[0] == '(' || starts_word(s, "s.t.") || istarts(s, "s.t.") ||
           starts_word(s, "subject") || starts_word(s, "maximize") || starts_word(s, "minimize") ||
           starts_word(s, "sum") || raw[0] == ' ' || raw[0] == '\t'))
        last = i;
      else if (!s.empty())
        break;
    } else if (kind == CodeKind::lp) {
      if (iequals(s, "end")) {
        last = i;
        break;
      }
      if (!s.empty()) last = i;
    }
  }
  if (last == lines.size() || last < first) return {};
  std::string out(text.substr(lines[first].begin, lines[last].end - lines[first].begin));
  out += '\n';
  return out;
}

}  // namespace

const char* to_string(CodeKind kind) {
  switch (kind) {
    case CodeKind::none:
      return "none";
    case CodeKind::mathprog:
      return "mathprog";
    case CodeKind::lp:
      return "lp";
    case CodeKind::python:
      return "python";
  }
  return "none";
}

CodeKind parse_code_kind(std::string_view name) {
  std::string n = to_lower(name);
  if (n == "mathprog" || n == "gmpl" || n == "ampl") return CodeKind::mathprog;
  if (n == "lp") return CodeKind::lp;
  if (n == "python") return CodeKind::python;
  if (n == "auto" || n.empty()) return CodeKind::none;
  throw Error("unknown format '" + std::string(name) + "' (expected mathprog, lp, python or auto)")
      .field("--format");
}

CodeKind kind_for_tag(std::string_view tag, bool& other_language) {
  other_language = false;
  std::string t = to_lower(tag);
  for (const char* p : {"python", "py", "python3", "py3", "ipython", "pyomo", "pulp", "gurobipy"})
    if (t == p) return CodeKind::python;
  for (const char* m : {"mathprog", "gmpl", "mpl", "glpk", "ampl", "mod", "gnu-mathprog",
                        "gnumathprog", "math-prog", "gnu_mathprog"})
    if (t == m) return CodeKind::mathprog;
  for (const char* l : {"lp", "cplex", "cplex-lp", "cplexlp", "lpfile", "cplex_lp"})
    if (t == l) return CodeKind::lp;
  for (const char* s : {"", "text", "txt", "plain", "plaintext", "code", "none", "model"})
    if (t == s) return CodeKind::none;
  other_language = true;
  return CodeKind::none;
}

CodeKind sniff_code(std::string_view text, CodeKind hint) {
  return best_kind(score(text), hint, 3);
}

std::string normalize_mathprog(std::string_view code) {
  std::string out;
  out.reserve(code.size());
  for (const Line& l : split_lines(code)) {
    std::string_view raw = code.substr(l.begin, l.end - l.begin);
    std::string_view s = strip(raw);
    bool drop = false;
    if (!s.empty() && s.back() == ';') {
      if (starts_word(s, "option") || iequals(s, "reset;") || starts_word(s, "include") ||
          starts_word(s, "shell") || starts_word(s, "commands"))
        drop = true;
      if ((starts_word(s, "model") || starts_word(s, "data")) && s.size() > 6 &&
          s.find(':') == std::string_view::npos && s.find('=') == std::string_view::npos)
        drop = true;  // "model file.mod;" / "data file.dat;" (not "data;")
    }
    if (drop) continue;
    out.append(raw);
    if (l.end < code.size()) out += '\n';
  }
  return out;
}

Extraction extract_code(std::string_view completion, CodeKind hint) {
  Extraction ex;
  if (strip(completion).empty()) {
    ex.failure = Category::no_code;
    ex.detail = "empty completion";
    return ex;
  }
  std::vector<std::pair<size_t, size_t>> spans;
  std::vector<Block> blocks = fenced_blocks(completion, spans);
  for (auto& b : tagged_blocks(completion, spans)) blocks.push_back(std::move(b));
  std::sort(blocks.begin(), blocks.end(),
            [](const Block& a, const Block& b) { return a.start < b.start; });
  ex.blocks = static_cast<int>(blocks.size());

  struct Candidate {
    size_t index;
    CodeKind kind;
    bool sniffed;
  };
  std::vector<Candidate> executable;
  std::vector<std::string> other_tags;
  int empty_code_blocks = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    bool other = false;
    CodeKind kind = kind_for_tag(blocks[i].tag, other);
    bool sniffed = false;
    if (kind == CodeKind::none && !other) {
      kind = sniff_code(blocks[i].content, hint);
      sniffed = true;
    }
    if (kind == CodeKind::none) {
      other_tags.push_back(blocks[i].tag.empty() ? "untagged" : blocks[i].tag);
      continue;
    }
    // Blank once AMPL-only commands are dropped (a block of just `option ...;`) is empty too.
    if (strip(kind == CodeKind::mathprog ? normalize_mathprog(blocks[i].content)
                                         : blocks[i].content)
            .empty()) {
      ++empty_code_blocks;
      continue;
    }
    executable.push_back({i, kind, sniffed});
  }
  if (!executable.empty()) {
    const Candidate* pick = &executable.back();
    if (hint != CodeKind::none)
      for (auto it = executable.rbegin(); it != executable.rend(); ++it)
        if (it->kind == hint) {
          pick = &*it;
          break;
        }
    const Block& b = blocks[pick->index];
    ex.kind = pick->kind;
    ex.code = b.content;
    ex.method = std::string(b.xml_tag ? "tag:<" : "fence:") + (b.tag.empty() ? "untagged" : b.tag) +
                (b.xml_tag ? ">" : "") + (pick->sniffed ? "+sniff" : "") +
                (b.closed ? "" : "+unclosed");
    if (executable.size() > 1)
      ex.detail = std::to_string(executable.size()) + " executable blocks, took the " +
                  (pick == &executable.back() ? "last" : "last " + std::string(to_string(hint)));
    if (ex.kind == CodeKind::mathprog) ex.code = normalize_mathprog(ex.code);
    return ex;
  }
  if (!blocks.empty()) {
    ex.failure = Category::extraction_failed;
    ex.detail = std::to_string(blocks.size()) + " block(s), none executable";
    if (empty_code_blocks > 0) ex.detail += " (" + std::to_string(empty_code_blocks) + " empty)";
    if (!other_tags.empty()) {
      std::vector<std::string> unique;
      for (const auto& t : other_tags)
        if (std::find(unique.begin(), unique.end(), t) == unique.end() && unique.size() < 8)
          unique.push_back(t);
      ex.detail += ": " + join(unique, ", ");
    }
    return ex;
  }
  // No blocks: unfenced code in prose.
  CodeKind kind = best_kind(score(completion), hint, 4);
  if (kind != CodeKind::none) {
    std::string code = carve(completion, kind);
    if (kind == CodeKind::mathprog) code = normalize_mathprog(code);
    if (!strip(code).empty()) {
      ex.kind = kind;
      ex.code = code;
      ex.method = "unfenced";
      return ex;
    }
    ex.failure = Category::extraction_failed;
    ex.detail = std::string("looks like ") + to_string(kind) + " but no code could be carved out";
    return ex;
  }
  ex.failure = Category::no_code;
  ex.detail = "no code block and no code-like lines";
  return ex;
}

}  // namespace trex::orlib::eval
