#include "trex/or/dataset/collected.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib {
namespace {

// The entity at html[i] ('&'): appends its text and returns the index after
// it; an unknown or malformed one is kept as a literal '&'.
size_t decode_entity(const std::string& html, size_t i, std::string& out) {
  const size_t end = html.find(';', i);
  if (end == std::string::npos || end - i > 10) {
    out += '&';
    return i + 1;
  }
  const std::string name = html.substr(i + 1, end - i - 1);
  static const std::pair<const char*, uint32_t> kNamed[] = {
      {"lt", '<'},       {"gt", '>'},       {"amp", '&'},       {"quot", '"'},    {"apos", '\''},
      {"nbsp", ' '},     {"copy", 0xA9},    {"reg", 0xAE},      {"deg", 0xB0},    {"plusmn", 0xB1},
      {"times", 0xD7},   {"divide", 0xF7},  {"le", 0x2264},     {"ge", 0x2265},   {"ne", 0x2260},
      {"ndash", 0x2013}, {"mdash", 0x2014}, {"hellip", 0x2026}, {"rarr", 0x2192}, {"sum", 0x2211}};
  for (const auto& [entity, cp] : kNamed)
    if (name == entity) {
      append_utf8(static_cast<char32_t>(cp), out);
      return end + 1;
    }
  if (name.size() >= 2 && name[0] == '#') {
    const bool hex = name[1] == 'x' || name[1] == 'X';
    const std::string digits = name.substr(hex ? 2 : 1);
    const bool valid = !digits.empty() && std::all_of(digits.begin(), digits.end(), [&](char c) {
      return hex ? std::isxdigit(static_cast<unsigned char>(c)) != 0
                 : std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
    if (valid) {
      const unsigned long cp =
          digits.size() > 7 ? 0xFFFD : std::stoul(digits, nullptr, hex ? 16 : 10);
      const bool scalar = cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
      append_utf8(cp == 0xA0 ? U' ' : scalar ? static_cast<char32_t>(cp) : U'\uFFFD', out);
      return end + 1;
    }
  }
  out += '&';
  return i + 1;
}

bool is_block(const std::string& tag) {
  static const char* kBlocks[] = {"p",   "br",         "div",    "ul",   "ol",      "table",
                                  "tr",  "hr",         "dl",     "dd",   "dt",      "li",
                                  "pre", "blockquote", "h1",     "h2",   "h3",      "h4",
                                  "h5",  "h6",         "center", "body", "section", "form"};
  return std::find_if(std::begin(kBlocks), std::end(kBlocks),
                      [&](const char* b) { return tag == b; }) != std::end(kBlocks);
}

// Windows-1252 for the bytes that are not well-formed UTF-8: pages of older
// documentation (lp_solve's: "Copyright \xa9") are in that code page.
std::string utf8_from_legacy_bytes(std::string_view text) {
  // U+20AC..U+0178 for 0x80..0x9F; 0 where Windows-1252 leaves a byte undefined.
  static const uint16_t k1252[32] = {
      0x20AC, 0,      0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0,      0x017D, 0,      0,      0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0,      0x017E, 0x0178};
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const long n = utf8_sequence(text, i);
    if (n > 0) {
      out.append(text.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
      continue;
    }
    const auto byte = static_cast<unsigned char>(text[i++]);
    const uint32_t cp = byte >= 0xA0 ? byte : k1252[byte - 0x80];
    append_utf8(cp == 0 ? U'\uFFFD' : static_cast<char32_t>(cp), out);
  }
  return out;
}

// Collapses blank-line runs to one blank line and trims each line's right end.
std::string tidy_lines(const std::string& text) {
  std::string out;
  size_t blank = 2;  // no leading blank lines
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
      line.pop_back();
    if (line.empty()) {
      if (++blank == 1) out += '\n';
    } else {
      blank = 0;
      out += line + '\n';
    }
    start = end + 1;
  }
  while (out.size() >= 2 && out[out.size() - 1] == '\n' && out[out.size() - 2] == '\n')
    out.pop_back();
  return out;
}

}  // namespace

const std::vector<CollectedSource>& default_collected_sources() {
  static const std::vector<CollectedSource> sources = {
      {"lp_solve 5.5 reference guide", "lp-solve-doc", "/usr/share/doc/lp-solve-doc",
       "LGPL-2.1-or-later",
       "Michel Berkelaar, Kjell Eikland, Peter Notebaert and the lp_solve authors "
       "(/usr/share/doc/lp-solve-doc/copyright: \"lp_solve itself is LGPL\")"},
      // The English manuals only (gmpl_es / gmpl_pt-BR are translations of gmpl.pdf).
      {"GLPK 5.0 manuals (MathProg language reference, API, graph and CNF-SAT routines)",
       "glpk-doc",
       "/usr/share/doc/glpk-doc",
       "GFDL-1.3-no-invariants-or-later",
       "2000-2020 Free Software Foundation, Inc. (/usr/share/doc/glpk-doc/copyright: doc/*.tex "
       "GFDL-NIV-1.3+)",
       {"gmpl.pdf", "glpk.pdf", "graphs.pdf", "cnfsat.pdf"}},
  };
  return sources;
}

std::string pdf_to_text(const std::string& path) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw Error(path + ": pipe: " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {"pdftotext", "-layout", "-enc", "UTF-8", "-q", path, "-"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "pdftotext", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawned != 0) {
    close(pipe_fds[0]);
    throw Error(path + ": cannot run pdftotext (" + std::strerror(spawned) +
                "); scripts/install-deps.sh installs it (Debian package poppler-utils)");
  }
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(pipe_fds[0], buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(path + ": pdftotext failed (" +
                (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                   : std::string("killed by a signal")) +
                "); is it a PDF file?");
  return out;
}

namespace {

bool blank_line(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// A line the manual's layout made, not its text: a page number, a
// table-of-contents entry ("3.1 Numeric expressions . . . . . 12"), or a lone
// glyph of a decorated title page.
bool layout_line(std::string_view line) {
  const std::string t = trim(line);
  if (t.empty()) return false;
  if (t.find_first_not_of("0123456789") == std::string::npos) return true;
  if (t.find(". . . .") != std::string::npos) return true;
  // Corner glyphs of a title page, alone or as a spread-out pair ("M       L").
  const std::vector<std::string> words = split(collapse_whitespace(t), ' ');
  if (words.size() == 2 && t.size() > 8 && words[0].size() == 1 && words[1].size() == 1 &&
      std::isupper(static_cast<unsigned char>(words[0][0])) &&
      std::isupper(static_cast<unsigned char>(words[1][0])))
    return true;
  return t.size() <= 3 && t.find_first_of(" ") == std::string::npos &&
         !std::isdigit(static_cast<unsigned char>(t[0])) && t != "}" && t != "};" && t != "end;";
}

// Typographic ligatures as their letters, so the corpus spells "coefficient" one way.
std::string unligature(std::string text) {
  for (const auto& [from, to] : {std::pair<const char*, const char*>{"\uFB00", "ff"},
                                 {"\uFB01", "fi"},
                                 {"\uFB02", "fl"},
                                 {"\uFB03", "ffi"},
                                 {"\uFB04", "ffl"}})
    text = replace_all(std::move(text), from, to);
  return text;
}

// "3.1    Numeric expressions", "E.2     Generated LP problem instance", "1   Introduction".
bool section_heading(std::string_view line) {
  size_t i = 0;
  if (i < line.size() && std::isupper(static_cast<unsigned char>(line[i])) && i + 1 < line.size() &&
      line[i + 1] == '.') {
    ++i;
  } else if (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) {
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  } else {
    return false;
  }
  while (i + 1 < line.size() && line[i] == '.' &&
         std::isdigit(static_cast<unsigned char>(line[i + 1]))) {
    ++i;
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  }
  // Two or more spaces, then a capitalised title word of letters.
  size_t spaces = 0;
  while (i < line.size() && line[i] == ' ') ++i, ++spaces;
  return spaces >= 2 && i + 1 < line.size() && std::isupper(static_cast<unsigned char>(line[i])) &&
         std::islower(static_cast<unsigned char>(line[i + 1]));
}

}  // namespace

std::string clean_pdf_text(const std::string& text) {
  std::vector<std::string> lines;
  for (std::string line : split(unligature(text), '\n')) {
    line.erase(std::remove(line.begin(), line.end(), '\f'), line.end());
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    if (layout_line(line)) continue;
    lines.push_back(std::move(line));
  }
  // "param-" + "eter" at the next line's start -> "parameter" (lower-case continuation only,
  // so "San-" + "Diego" and "-x" stay as they are).
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    std::string& line = lines[i];
    if (line.size() < 3 || line.back() != '-' ||
        !std::isalpha(static_cast<unsigned char>(line[line.size() - 2])))
      continue;
    std::string& next = lines[i + 1];
    const size_t start = next.find_first_not_of(' ');
    if (start == std::string::npos || !std::islower(static_cast<unsigned char>(next[start])))
      continue;
    size_t end = start;
    while (end < next.size() && next[end] != ' ') ++end;
    line.pop_back();
    line += next.substr(start, end - start);
    next = next.substr(end < next.size() ? end + 1 : end);
  }
  return tidy_lines(join(lines, "\n"));
}

std::vector<std::string> manual_sections(const std::string& text, size_t min_chars,
                                         size_t max_chars) {
  std::vector<std::string> raw;
  std::string current;
  for (const std::string& line : split(text, '\n')) {
    if (section_heading(line) && !current.empty()) {
      raw.push_back(std::move(current));
      current.clear();
    }
    current += line + "\n";
  }
  if (!blank_line(current)) raw.push_back(std::move(current));
  std::vector<std::string> out;
  std::string pending;
  auto emit = [&](std::string s) {
    // Long sections are cut at the last blank line before max_chars.
    while (s.size() > max_chars) {
      size_t cut = s.rfind("\n\n", max_chars);
      if (cut == std::string::npos || cut < max_chars / 4) cut = s.rfind('\n', max_chars);
      if (cut == std::string::npos || cut == 0) cut = max_chars;
      out.push_back(tidy_lines(s.substr(0, cut)));
      s = s.substr(cut);
    }
    if (!blank_line(s)) out.push_back(tidy_lines(s));
  };
  for (std::string& s : raw) {
    pending += s;
    if (pending.size() >= min_chars) {
      emit(std::move(pending));
      pending.clear();
    }
  }
  if (!blank_line(pending)) emit(std::move(pending));
  return out;
}

std::string html_title(const std::string& html) {
  const std::string low = to_lower(html);
  const size_t open = low.find("<title");
  if (open == std::string::npos) return "";
  const size_t start = low.find('>', open);
  const size_t close = low.find("</title", start == std::string::npos ? open : start);
  if (start == std::string::npos || close == std::string::npos) return "";
  std::string title = html_to_text(html.substr(start + 1, close - start - 1));
  while (!title.empty() && std::isspace(static_cast<unsigned char>(title.back()))) title.pop_back();
  return title;
}

std::string html_to_text(const std::string& html) {
  std::string out;
  int pre = 0;             // inside <pre> (nesting depth)
  bool space = true;       // the last character written outside <pre> is whitespace
  std::string skip_until;  // inside <script>/<style>: its closing tag
  for (size_t i = 0; i < html.size();) {
    const char c = html[i];
    if (c == '<') {
      if (html.compare(i, 4, "<!--") == 0) {  // comment
        const size_t end = html.find("-->", i + 4);
        i = end == std::string::npos ? html.size() : end + 3;
        continue;
      }
      size_t end = i + 1;
      char quote = 0;
      for (; end < html.size(); ++end) {
        if (quote) {
          if (html[end] == quote) quote = 0;
        } else if (html[end] == '"' || html[end] == '\'') {
          quote = html[end];
        } else if (html[end] == '>') {
          break;
        }
      }
      std::string inside = html.substr(i + 1, end - i - 1);
      i = end == html.size() ? end : end + 1;
      const bool closing = !inside.empty() && inside[0] == '/';
      size_t n = closing ? 1 : 0;
      std::string tag;
      while (n < inside.size() && std::isalnum(static_cast<unsigned char>(inside[n])))
        tag += static_cast<char>(std::tolower(static_cast<unsigned char>(inside[n++])));
      if (!skip_until.empty()) {
        if (closing && tag == skip_until) skip_until.clear();
        continue;
      }
      if (!closing && (tag == "script" || tag == "style" || tag == "head" || tag == "title")) {
        skip_until = tag;  // the <title> is read by html_title
        continue;
      }
      if (closing && tag == "li") continue;  // the next item or the list's end breaks the line
      if (tag == "pre") pre = closing ? std::max(0, pre - 1) : pre + 1;
      if (tag == "td" || tag == "th") {
        if (!closing && !space) {
          out += ' ';
          space = true;
        }
        continue;
      }
      if (!is_block(tag)) continue;
      out += '\n';
      if (tag == "p" || tag == "pre" || tag == "table" || tag[0] == 'h') out += '\n';
      if (!closing && tag.size() == 2 && tag[0] == 'h' && tag[1] >= '1' && tag[1] <= '6')
        out += std::string(static_cast<size_t>(tag[1] - '0'), '#') + ' ';
      if (!closing && tag == "li") out += "- ";
      space = true;
      continue;
    }
    if (!skip_until.empty()) {
      ++i;
      continue;
    }
    std::string piece;
    if (c == '&') {
      i = decode_entity(html, i, piece);
    } else {
      piece = std::string(1, c);
      ++i;
    }
    if (pre > 0) {
      out += piece;
      space = !piece.empty() && std::isspace(static_cast<unsigned char>(piece.back()));
    } else if (piece.size() == 1 && std::isspace(static_cast<unsigned char>(piece[0]))) {
      if (!space) out += ' ';
      space = true;
    } else {
      out += piece;
      space = false;
    }
  }
  return tidy_lines(out);
}

std::vector<CollectedDocument> collected_documents(const CollectedSource& source,
                                                   CollectedStats* stats) {
  std::vector<CollectedDocument> out;
  if (source.dir.empty() || !std::filesystem::is_directory(source.dir)) return out;
  std::vector<std::filesystem::path> paths;
  if (source.files.empty()) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(source.dir)) {
      const std::string ext = to_lower(e.path().extension().string());
      if (e.is_regular_file() && (ext == ".htm" || ext == ".html")) paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
  } else {
    for (const std::string& f : source.files)
      paths.push_back(std::filesystem::path(source.dir) / f);
  }
  const std::string credit = "(From the " + source.name + ", Debian package " + source.package +
                             "; licence " + source.license + ".)\n\n";
  for (const auto& path : paths) {
    if (stats) ++stats->files;
    if (to_lower(path.extension().string()) == ".pdf") {
      std::string manual;
      try {
        manual = clean_pdf_text(pdf_to_text(path.string()));
      } catch (const Error& e) {
        if (stats) {
          ++stats->failed;
          stats->errors.push_back(e.what());
        }
        continue;
      }
      const std::string file = std::filesystem::relative(path, source.dir).string();
      const std::vector<std::string> sections =
          manual_sections(manual, kMinCollectedChars * 4, kMaxManualSectionChars);
      for (size_t k = 0; k < sections.size(); ++k) {
        if (sections[k].size() < kMinCollectedChars) {
          if (stats) ++stats->too_short;
          continue;
        }
        const std::string heading = trim(sections[k].substr(0, sections[k].find('\n')));
        out.push_back({file + "#" + std::to_string(k + 1),
                       "# " + collapse_whitespace(heading) + "\n\n" + credit + sections[k]});
      }
      continue;
    }
    if (!std::filesystem::is_regular_file(path)) {
      if (stats) {
        ++stats->failed;
        stats->errors.push_back(path.string() + ": no such file");
      }
      continue;
    }
    const std::string html = utf8_from_legacy_bytes(read_file(path.string()));
    std::string body = html_to_text(html);
    if (body.size() < kMinCollectedChars) {
      if (stats) ++stats->too_short;
      continue;
    }
    const std::string title = html_title(html);
    std::string text;
    if (!title.empty() && body.rfind("# " + title, 0) != 0) text = "# " + title + "\n\n";
    text += credit + body;
    out.push_back({std::filesystem::relative(path, source.dir).string(), std::move(text)});
  }
  return out;
}

}  // namespace trex::orlib
