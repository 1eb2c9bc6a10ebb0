#pragma once
// Collected domain text for the CPT corpus: solver documentation that Debian
// packages install and that may be redistributed, extracted to plain text,
// cleaned and recorded with its licence (the corpus manifest in summary.json).
// HTML is read here (tags dropped, <pre> kept verbatim, entities decoded);
// PDF manuals through poppler's pdftotext (Debian poppler-utils) in layout
// mode, which keeps code and tables in their columns; the GLPK example models
// are read by the CPT builder itself.
#include <cstdint>
#include <string>
#include <vector>

namespace trex::orlib {

struct CollectedSource {
  std::string name;       // "lp_solve 5.5 reference guide"
  std::string package;    // the Debian package that installs it
  std::string dir;        // where it installs the files
  std::string license;    // SPDX identifier
  std::string copyright;  // as the package's copyright file states it
  // Files to read, relative to dir (PDF or HTML); empty: every HTML page under dir.
  std::vector<std::string> files = {};
};

// The sources `trex or cpt` reads by default (scripts/install-deps.sh installs them).
const std::vector<CollectedSource>& default_collected_sources();

// Plain text of an HTML page: script/style dropped, block elements as line
// breaks (headings as "#"-lines, list items as "- "), <pre> verbatim, the
// rest's whitespace collapsed, entities (&lt; &amp; &#233; ...) decoded to UTF-8.
std::string html_to_text(const std::string& html);
// The page's <title> text ("" when it has none).
std::string html_title(const std::string& html);

struct CollectedDocument {
  std::string file;  // relative to the source's dir
  std::string text;
};

struct CollectedStats {
  int64_t files = 0;      // files read
  int64_t too_short = 0;  // pages/sections with under kMinCollectedChars of text (indexes, stubs)
  int64_t failed = 0;     // files that could not be read or converted
  std::vector<std::string> errors;  // one line per failed file
};
constexpr size_t kMinCollectedChars = 400;
constexpr size_t kMaxManualSectionChars = 12000;  // a manual's long chapters are cut near this

// The text of a PDF file: `pdftotext -layout -enc UTF-8 FILE -`. Throws
// trex::Error naming the file when pdftotext is missing or fails.
std::string pdf_to_text(const std::string& path);
// pdftotext output made corpus text: page breaks, page-number lines,
// table-of-contents lines (dot leaders) and lone-glyph lines dropped; a word
// hyphenated across a line end rejoined; blank-line runs collapsed.
std::string clean_pdf_text(const std::string& text);
// A manual's text cut at its numbered section headings ("3.1    Numeric
// expressions", "E.2     Generated LP problem instance"): sections shorter than
// min_chars are merged into the next, longer than max_chars split at blank lines.
std::vector<std::string> manual_sections(const std::string& text, size_t min_chars,
                                         size_t max_chars);

// Every *.htm / *.html page under source.dir (sorted by path), or every file
// of source.files, as documents: "# <title>" (an HTML page's title, a manual
// section's heading) unless the text starts with it, a line naming the source
// and its licence, then the text; a PDF manual gives one document per section.
// A missing directory gives none (the caller reports it); a file that cannot
// be converted is counted in stats->failed with its error.
std::vector<CollectedDocument> collected_documents(const CollectedSource& source,
                                                   CollectedStats* stats);

}  // namespace trex::orlib
