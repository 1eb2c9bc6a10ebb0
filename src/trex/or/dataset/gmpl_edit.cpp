#include "trex/or/dataset/gmpl_edit.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <tuple>

#include "trex/core/strings.hpp"

namespace trex::orlib {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out = split(text, '\n');
  return out;
}

std::string join_lines(const std::vector<std::string>& lines) {
  return join(lines, "\n");
}

// Index of the `data;` line, or lines.size().
size_t data_start(const std::vector<std::string>& lines) {
  for (size_t i = 0; i < lines.size(); ++i)
    if (trim(lines[i]) == "data;") return i;
  return lines.size();
}

bool is_constraint(const std::string& line) {
  return starts_with(line, "s.t. ");
}

std::string statement_name(const std::string& line, size_t skip) {
  size_t i = skip;
  std::string name;
  while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_'))
    name += line[i++];
  return name;
}

std::string constraint_name(const std::string& line) {
  return statement_name(line, 5);
}

// Model lines (before `data;`) that satisfy `pred`.
template <typename Pred>
std::vector<size_t> model_lines(const std::vector<std::string>& lines, Pred pred) {
  std::vector<size_t> out;
  size_t end = data_start(lines);
  for (size_t i = 0; i < end; ++i)
    if (pred(lines[i])) out.push_back(i);
  return out;
}

struct VarDecl {
  std::string name;
  std::string type;  // "binary", "integer" or ""
};

std::vector<VarDecl> variables(const std::vector<std::string>& lines) {
  std::vector<VarDecl> out;
  for (size_t i : model_lines(lines, [](const std::string& l) { return starts_with(l, "var "); })) {
    VarDecl v;
    v.name = statement_name(lines[i], 4);
    if (lines[i].find(" binary") != std::string::npos)
      v.type = "binary";
    else if (lines[i].find(" integer") != std::string::npos)
      v.type = "integer";
    out.push_back(v);
  }
  return out;
}

bool mentions(const std::string& line, const std::string& var) {
  size_t colon = line.find(':');
  if (colon == std::string::npos) return false;
  for (size_t p = line.find(var, colon); p != std::string::npos; p = line.find(var, p + 1)) {
    bool left =
        p == 0 || !(std::isalnum(static_cast<unsigned char>(line[p - 1])) || line[p - 1] == '_');
    size_t e = p + var.size();
    bool right =
        e >= line.size() || !(std::isalnum(static_cast<unsigned char>(line[e])) || line[e] == '_');
    if (left && right) return true;
  }
  return false;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// Position of a lone "=" (not part of <=, >=, :=, ==, !=).
std::optional<size_t> lone_equals(const std::string& line) {
  size_t colon = line.find(':');
  if (colon == std::string::npos) return std::nullopt;
  for (size_t p = colon + 1; p < line.size(); ++p) {
    if (line[p] != '=') continue;
    char before = line[p - 1];
    char after = p + 1 < line.size() ? line[p + 1] : ' ';
    if (before == '<' || before == '>' || before == ':' || before == '=' || before == '!' ||
        after == '=')
      continue;
    return p;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- data section

struct Token {
  size_t offset = 0;  // in the text tokenised
  std::string text;
};

// Tokens of text[begin, end): split at whitespace, ':' and ':=' on their own.
std::vector<Token> tokens_of(const std::string& text, size_t begin, size_t end) {
  std::vector<Token> out;
  Token cur;
  auto flush = [&] {
    if (!cur.text.empty()) out.push_back(cur);
    cur.text.clear();
  };
  for (size_t i = begin; i < end; ++i) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      flush();
    } else if (c == ':') {
      flush();
      if (i + 1 < end && text[i + 1] == '=') {
        out.push_back({i, ":="});
        ++i;
      } else {
        out.push_back({i, ":"});
      }
    } else {
      if (cur.text.empty()) cur.offset = i;
      cur.text += c;
    }
  }
  flush();
  return out;
}

bool all_numbers(const std::vector<std::string>& tokens) {
  double v = 0;
  return std::all_of(tokens.begin(), tokens.end(),
                     [&](const std::string& t) { return parse_number(t, v); });
}

bool bracketed(const std::string& token) {
  return token.size() > 2 && token.front() == '[' && token.back() == ']';
}

// One statement: `body` collapsed, `t` its tokens (offsets in the data section).
DataStatement classify(std::string body, const std::vector<Token>& t) {
  DataStatement s;
  s.raw = std::move(body);
  auto take = [&](size_t i) {
    s.values.push_back(t[i].text);
    s.value_offsets.push_back(t[i].offset);
  };
  // Slices, tuples and `(tr)` are left as written.
  const bool plain = s.raw.find_first_of("[(") == std::string::npos;
  if (t[0].text == "set") {
    s.kind = DataStatement::set;
    s.name = t.size() > 1 ? t[1].text : "";
  } else if (t[0].text == "param" && t.size() >= 4 && t[1].text != ":") {
    s.name = t[1].text;
    const size_t rest = 3;  // first token after the name and ':=' (or ':')
    if (t[2].text == ":=" && plain) {
      if (t.size() - rest == 1) {
        take(rest);
        if (all_numbers(s.values)) s.kind = DataStatement::scalar;
      } else if ((t.size() - rest) % 2 == 0) {
        for (size_t i = rest; i < t.size(); i += 2) {
          s.keys.push_back(t[i].text);
          take(i + 1);
        }
        if (all_numbers(s.values)) s.kind = DataStatement::vector;
      }
    } else if (t[2].text == ":=" && s.raw.find('(') == std::string::npos &&
               (t.size() - rest) % 2 == 0) {
      bool keys_bracketed = true;
      for (size_t i = rest; i < t.size(); i += 2) {
        keys_bracketed = keys_bracketed && bracketed(t[i].text);
        s.keys.push_back(t[i].text.substr(1, t[i].text.size() - 2));
        take(i + 1);
      }
      if (keys_bracketed && all_numbers(s.values)) s.kind = DataStatement::sparse;
    } else if (t[2].text == ":" && plain) {
      size_t assign = rest;
      while (assign < t.size() && t[assign].text != ":=") s.cols.push_back(t[assign++].text);
      const size_t width = s.cols.size() + 1;
      const size_t first = assign + 1;
      if (assign < t.size() && !s.cols.empty() && first < t.size() &&
          (t.size() - first) % width == 0) {
        for (size_t i = first; i < t.size(); i += width) {
          s.keys.push_back(t[i].text);
          for (size_t c = 1; c < width; ++c) take(i + c);
        }
        if (all_numbers(s.values)) s.kind = DataStatement::table;
      }
    }
    if (s.kind == DataStatement::other) {
      s.keys.clear();
      s.cols.clear();
      s.values.clear();
      s.value_offsets.clear();
    }
  }
  return s;
}

// Lines i..j of the statement starting at line i (up to the line ending in ';').
size_t statement_end(const std::vector<std::string>& lines, size_t i) {
  size_t j = i;
  while (j + 1 < lines.size() && (trim(lines[j]).empty() || trim(lines[j]).back() != ';')) ++j;
  return j;
}

std::string statement_text(const std::vector<std::string>& lines, size_t i) {
  std::string text;
  for (size_t k = i; k <= statement_end(lines, i); ++k) text += (k > i ? "\n" : "") + lines[k];
  return text;
}

// Removes the whole statement starting at line i; returns its text.
std::string erase_statement(std::vector<std::string>& lines, size_t i) {
  std::string text = statement_text(lines, i);
  size_t j = statement_end(lines, i);
  lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i),
              lines.begin() + static_cast<std::ptrdiff_t>(j + 1));
  return text;
}

}  // namespace

const char* to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::wrong_var_type:
      return "wrong_var_type";
    case FaultKind::dropped_constraint:
      return "dropped_constraint";
    case FaultKind::flipped_inequality:
      return "flipped_inequality";
    case FaultKind::wrong_coefficient:
      return "wrong_coefficient";
    case FaultKind::swapped_indices:
      return "swapped_indices";
    case FaultKind::missing_big_m_link:
      return "missing_big_m_link";
    case FaultKind::equality_vs_inequality:
      return "equality_vs_inequality";
    case FaultKind::syntax_error:
      return "syntax_error";
  }
  return "?";
}

bool may_fail_translation(FaultKind kind) {
  return kind == FaultKind::syntax_error || kind == FaultKind::swapped_indices ||
         kind == FaultKind::wrong_coefficient;
}

const std::vector<FaultKind>& all_fault_kinds() {
  static const std::vector<FaultKind> kinds = {
      FaultKind::wrong_var_type,         FaultKind::dropped_constraint,
      FaultKind::flipped_inequality,     FaultKind::wrong_coefficient,
      FaultKind::swapped_indices,        FaultKind::missing_big_m_link,
      FaultKind::equality_vs_inequality, FaultKind::syntax_error};
  return kinds;
}

std::vector<std::string> constraint_names(const std::string& gmpl) {
  std::vector<std::string> out;
  auto lines = lines_of(gmpl);
  for (size_t i : model_lines(lines, is_constraint)) out.push_back(constraint_name(lines[i]));
  return out;
}

bool parse_number(const std::string& token, double& value) {
  if (token.empty()) return false;
  char* end = nullptr;
  value = std::strtod(token.c_str(), &end);
  return end == token.c_str() + token.size() && std::isfinite(value);
}

std::vector<std::string> statement_tokens(const std::string& text) {
  std::vector<std::string> out;
  for (auto& t : tokens_of(text, 0, text.size())) out.push_back(std::move(t.text));
  return out;
}

std::vector<DataStatement> parse_data_section(const std::string& data) {
  std::string text = data;  // comments blanked out, so that offsets stay
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '#')
      while (i < text.size() && text[i] != '\n') text[i++] = ' ';
  std::vector<DataStatement> out;
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find(';', begin);
    if (end == std::string::npos) end = text.size();
    std::string body = collapse_whitespace(std::string_view(text).substr(begin, end - begin));
    if (!body.empty()) out.push_back(classify(std::move(body), tokens_of(text, begin, end)));
    begin = end + 1;
  }
  return out;
}

std::vector<std::string> written_values(const DataStatement& s) {
  if (s.kind != DataStatement::table || !s.transposed) return s.values;
  std::vector<std::string> out;
  const size_t rows = s.keys.size(), cols = s.cols.size();
  for (size_t c = 0; c < cols; ++c)
    for (size_t r = 0; r < rows; ++r) out.push_back(s.values[r * cols + c]);
  return out;
}

std::string render(const DataStatement& s) {
  switch (s.kind) {
    case DataStatement::scalar:
      return "param " + s.name + " := " + s.values[0] + ";\n";
    case DataStatement::vector: {
      std::string out = "param " + s.name + " :=";
      for (size_t i = 0; i < s.keys.size(); ++i) out += " " + s.keys[i] + " " + s.values[i];
      return out + ";\n";
    }
    case DataStatement::table: {
      const auto& heads = s.transposed ? s.keys : s.cols;
      const auto& lines = s.transposed ? s.cols : s.keys;
      std::string out = "param " + s.name + (s.transposed ? " (tr)" : "") + " :";
      for (const auto& h : heads) out += " " + h;
      out += " :=";
      const size_t cols = s.cols.size();
      for (size_t l = 0; l < lines.size(); ++l) {
        out += "\n" + lines[l];
        for (size_t h = 0; h < heads.size(); ++h)
          out += " " + (s.transposed ? s.values[h * cols + l] : s.values[l * cols + h]);
      }
      return out + ";\n";
    }
    default:
      return s.raw + ";\n";
  }
}

std::vector<DataValue> data_values(const std::string& gmpl) {
  std::vector<DataValue> out;
  auto lines = lines_of(gmpl);
  const size_t first_line = data_start(lines) + 1;
  if (first_line >= lines.size()) return out;
  std::vector<size_t> line_starts(lines.size());
  for (size_t i = 1; i < lines.size(); ++i)
    line_starts[i] = line_starts[i - 1] + lines[i - 1].size() + 1;
  const size_t data_begin = line_starts[first_line];
  for (const DataStatement& s : parse_data_section(gmpl.substr(data_begin))) {
    if (s.kind == DataStatement::set || s.kind == DataStatement::other) continue;
    for (size_t k = 0; k < s.values.size(); ++k) {
      const size_t at = data_begin + s.value_offsets[k];
      const size_t line = static_cast<size_t>(
          std::upper_bound(line_starts.begin(), line_starts.end(), at) - line_starts.begin() - 1);
      std::string key;
      if (s.kind == DataStatement::table)
        key = s.keys[k / s.cols.size()] + "," + s.cols[k % s.cols.size()];
      else if (s.kind != DataStatement::scalar)
        key = s.keys[k];
      out.push_back({line, at - line_starts[line], s.values[k].size(), s.name, key,
                     std::strtod(s.values[k].c_str(), nullptr)});
    }
  }
  return out;
}

std::string with_data_value(const std::string& gmpl, const DataValue& v, double new_value) {
  auto lines = lines_of(gmpl);
  lines[v.line].replace(v.pos, v.len, format_number(new_value));
  return join_lines(lines);
}

std::string describe(const DataValue& v) {
  return v.key.empty() ? v.param : v.param + "[" + v.key + "]";
}

std::optional<Fault> inject_fault(const std::string& gmpl, FaultKind kind, Rng& rng) {
  auto lines = lines_of(gmpl);
  Fault f;
  f.kind = kind;
  auto finish = [&](std::string location, std::string diagnosis) -> std::optional<Fault> {
    f.model = join_lines(lines);
    f.location = std::move(location);
    f.diagnosis = std::move(diagnosis);
    if (f.model == gmpl) return std::nullopt;
    return f;
  };
  auto pick = [&](const std::vector<size_t>& candidates) -> std::optional<size_t> {
    if (candidates.empty()) return std::nullopt;
    return candidates[rng.index(candidates.size())];
  };
  switch (kind) {
    case FaultKind::wrong_var_type: {
      auto i = pick(model_lines(lines, [](const std::string& l) {
        return starts_with(l, "var ") &&
               (l.find(" binary") != std::string::npos || l.find(" integer") != std::string::npos);
      }));
      if (!i) return std::nullopt;
      std::string& l = lines[*i];
      std::string name = statement_name(l, 4);
      bool binary = l.find(" binary") != std::string::npos;
      std::string type = binary ? "binary" : "integer";
      size_t p = l.find(" " + type);
      l.erase(p, 1 + type.size());  // drop " binary" / " integer"
      size_t semi = l.rfind(';');
      if (semi == std::string::npos) return std::nullopt;
      std::string bounds;
      if (l.find(">=") == std::string::npos) bounds += ", >= 0";
      if (binary && l.find("<=") == std::string::npos) bounds += ", <= 1";
      l.insert(semi, bounds);
      size_t doubled = l.find(", ,");
      if (doubled != std::string::npos) l.erase(doubled, 2);
      size_t dangling = l.find(",;");
      if (dangling != std::string::npos) l.erase(dangling, 1);
      size_t lead = l.find("}, ");
      if (lead != std::string::npos && lead + 1 < semi) l.erase(lead + 1, 1);
      return finish("variable " + name,
                    "The variable `" + name +
                        "` is declared continuous, but the decisions it "
                        "models are " +
                        (binary ? "yes/no choices" : "whole numbers") +
                        ", so the solver returns a fractional relaxation. Declaring `" + name +
                        "` as `" + type + "` restores the intended model.");
    }
    case FaultKind::dropped_constraint: {
      auto i = pick(model_lines(lines, is_constraint));
      if (!i) return std::nullopt;
      std::string name = constraint_name(lines[*i]);
      std::string original = erase_statement(lines, *i);
      return finish("constraint " + name,
                    "The constraint family `" + name +
                        "` is missing, so the model allows "
                        "solutions the problem statement forbids. The repair adds it back:\n\n" +
                        original);
    }
    case FaultKind::flipped_inequality: {
      auto i = pick(model_lines(lines, [](const std::string& l) {
        return is_constraint(l) && count_of(l, "<=") + count_of(l, ">=") == 1;
      }));
      if (!i) return std::nullopt;
      std::string& l = lines[*i];
      bool le = l.find("<=") != std::string::npos;
      size_t p = l.find(le ? "<=" : ">=");
      l.replace(p, 2, le ? ">=" : "<=");
      std::string name = constraint_name(l);
      return finish("constraint " + name,
                    "The inequality in `" + name + "` points the wrong way: it is written with `" +
                        std::string(le ? ">=" : "<=") + "` but the statement requires `" +
                        (le ? "<=" : ">=") + "`. Flipping it back fixes the model.");
    }
    case FaultKind::wrong_coefficient: {
      auto values = data_values(gmpl);
      std::vector<size_t> nonzero;
      for (size_t k = 0; k < values.size(); ++k)
        if (values[k].value != 0.0) nonzero.push_back(k);
      auto k = pick(nonzero);
      if (!k) return std::nullopt;
      const DataValue& v = values[*k];
      double factor = rng.bernoulli(0.5) ? 10.0 : 100.0;
      std::string wrong = format_number(v.value * factor);
      lines[v.line].replace(v.pos, v.len, wrong);
      return finish("parameter " + describe(v),
                    "The data value `" + describe(v) + "` is " + wrong + ", " +
                        format_number(factor) + " times the " + format_number(v.value) +
                        " given in the problem statement (a units or typing slip). Restoring " +
                        format_number(v.value) + " fixes the model.");
    }
    case FaultKind::swapped_indices: {
      std::vector<std::tuple<size_t, size_t, size_t>> spots;  // line, '[' pos, ']' pos
      size_t end = data_start(lines);
      for (size_t i = 0; i < end; ++i) {
        const std::string& l = lines[i];
        if (!is_constraint(l) && !starts_with(l, "minimize") && !starts_with(l, "maximize"))
          continue;
        size_t colon = l.find(':');
        for (size_t p = l.find('[', colon); p != std::string::npos; p = l.find('[', p + 1)) {
          size_t q = l.find(']', p);
          if (q == std::string::npos) break;
          auto parts = split(l.substr(p + 1, q - p - 1), ',');
          if (parts.size() != 2) continue;
          std::string a = trim(parts[0]), b = trim(parts[1]);
          auto ident = [](const std::string& s) {
            if (s.empty()) return false;
            for (char c : s)
              if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
            return true;
          };
          if (ident(a) && ident(b) && a != b) spots.emplace_back(i, p, q);
        }
      }
      if (spots.empty()) return std::nullopt;
      auto [i, p, q] = spots[rng.index(spots.size())];
      std::string& l = lines[i];
      auto parts = split(l.substr(p + 1, q - p - 1), ',');
      std::string before = l.substr(p, q - p + 1);
      std::string after = "[" + trim(parts[1]) + ", " + trim(parts[0]) + "]";
      l.replace(p, q - p + 1, after);
      std::string where = is_constraint(l) ? "constraint " + constraint_name(l) : "the objective";
      return finish(where, "In " + where + " a subscript is written `" + after +
                               "` where the index order must be `" + before +
                               "`; the indices are swapped. Restoring the order fixes it.");
    }
    case FaultKind::missing_big_m_link: {
      auto vars = variables(lines);
      std::vector<size_t> candidates;
      for (size_t i : model_lines(lines, is_constraint)) {
        bool bin = false, other = false;
        for (const auto& v : vars) {
          if (!mentions(statement_text(lines, i), v.name)) continue;
          (v.type == "binary" ? bin : other) = true;
        }
        if (bin && other) candidates.push_back(i);
      }
      auto i = pick(candidates);
      if (!i) return std::nullopt;
      std::string name = constraint_name(lines[*i]);
      std::string original = erase_statement(lines, *i);
      return finish(
          "constraint " + name,
          "The linking constraint `" + name +
              "` that ties the continuous/integer "
              "quantities to their on/off (binary) decisions is missing, so quantities can be "
              "positive while the switch is off. The repair restores the big-M link:\n\n" +
              original);
    }
    case FaultKind::equality_vs_inequality: {
      auto i = pick(model_lines(lines, [](const std::string& l) {
        return is_constraint(l) && (lone_equals(l) || count_of(l, "<=") + count_of(l, ">=") == 1);
      }));
      if (!i) return std::nullopt;
      std::string& l = lines[*i];
      std::string name = constraint_name(l);
      if (auto p = lone_equals(l)) {
        std::string op = rng.bernoulli(0.5) ? "<=" : ">=";
        l.replace(*p, 1, op);
        return finish("constraint " + name, "`" + name +
                                                "` must hold with equality, but it is "
                                                "written as `" +
                                                op + "`. Restoring `=` fixes it.");
      }
      bool le = l.find("<=") != std::string::npos;
      l.replace(l.find(le ? "<=" : ">="), 2, "=");
      return finish("constraint " + name, "`" + name + "` is an inequality (`" +
                                              std::string(le ? "<=" : ">=") +
                                              "`) but is written as an equation `=`, which "
                                              "over-constrains the model. Restoring `" +
                                              (le ? "<=" : ">=") + "` fixes it.");
    }
    case FaultKind::syntax_error: {
      auto cons = model_lines(lines, is_constraint);
      auto i = pick(cons);
      if (!i) return std::nullopt;
      std::string& l = lines[*i];
      std::string name = constraint_name(l);
      int variant = rng.uniform_int(0, 2);
      std::string what;
      if (variant == 0 && !l.empty() && l.back() == ';') {
        l.pop_back();
        what = "the statement `" + name + "` is missing its terminating `;`";
      } else if (variant == 1 && l.find("sum{") != std::string::npos) {
        l.replace(l.find("sum{"), 4, "sum(");
        what =
            "in `" + name + "` the indexing expression of `sum` is opened with `(` instead of `{`";
      } else {
        l.replace(0, 4, "st.");
        what = "the constraint `" + name + "` starts with `st.` instead of the keyword `s.t.`";
      }
      return finish("constraint " + name,
                    "The model does not translate: " + what + ". Correcting the syntax fixes it.");
    }
  }
  return std::nullopt;
}

}  // namespace trex::orlib
