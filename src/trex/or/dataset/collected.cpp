#include "trex/or/dataset/collected.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "trex/core/atomic_file.hpp"
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
  };
  return sources;
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
  for (const auto& e : std::filesystem::recursive_directory_iterator(source.dir)) {
    const std::string ext = to_lower(e.path().extension().string());
    if (e.is_regular_file() && (ext == ".htm" || ext == ".html")) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    if (stats) ++stats->files;
    const std::string html = utf8_from_legacy_bytes(read_file(path.string()));
    std::string body = html_to_text(html);
    if (body.size() < kMinCollectedChars) {
      if (stats) ++stats->too_short;
      continue;
    }
    const std::string title = html_title(html);
    std::string text;
    if (!title.empty() && body.rfind("# " + title, 0) != 0) text = "# " + title + "\n\n";
    text += "(From the " + source.name + ", Debian package " + source.package + "; licence " +
            source.license + ".)\n\n" + body;
    out.push_back({std::filesystem::relative(path, source.dir).string(), std::move(text)});
  }
  return out;
}

}  // namespace trex::orlib
