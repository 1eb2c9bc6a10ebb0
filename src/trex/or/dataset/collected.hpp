#pragma once
// Collected domain text for the CPT corpus: solver documentation that Debian
// packages install and that may be redistributed, extracted to plain text,
// cleaned and recorded with its licence (the corpus manifest in summary.json).
// HTML is read here (tags dropped, <pre> kept verbatim, entities decoded);
// the GLPK example models are read by the CPT builder itself.
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
  int64_t files = 0;      // HTML files read
  int64_t too_short = 0;  // pages with under kMinCollectedChars of text (indexes, stubs)
};
constexpr size_t kMinCollectedChars = 400;

// Every *.htm / *.html page under source.dir (sorted by path) as a document:
// "# <title>" unless the text starts with it, a line naming the source and
// its licence, then the page's text. A missing directory gives none (the
// caller reports it).
std::vector<CollectedDocument> collected_documents(const CollectedSource& source,
                                                   CollectedStats* stats);

}  // namespace trex::orlib
