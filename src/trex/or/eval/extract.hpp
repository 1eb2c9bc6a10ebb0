#pragma once
// Taking the executable code out of an LLM completion (rules in docs/or-eval.md):
// the last executable block, by fence tag (```python, ```mathprog/gmpl/ampl,
// ```lp) or by sniffing the content of untagged blocks, SIRL-style <python>
// tags, and unfenced code carved out of prose.
#include <string>
#include <string_view>

#include "trex/or/eval/grade.hpp"

namespace trex::orlib::eval {

enum class CodeKind { none, mathprog, lp, python };
const char* to_string(CodeKind kind);
// "mathprog" | "lp" | "python" | "auto" (= none); throws trex::Error otherwise.
CodeKind parse_code_kind(std::string_view name);

struct Extraction {
  CodeKind kind = CodeKind::none;
  std::string code;
  std::string method;  // e.g. "fence:python", "fence:untagged+sniff", "tag:<python>", "unfenced"
  Category failure = Category::no_code;  // when kind == none: no_code or extraction_failed
  std::string detail;
  int blocks = 0;  // fenced or tagged blocks seen
};

// `hint` (the format the prompt asked for) breaks ties when sniffing and, when
// some block has that kind, selects the last block of that kind.
Extraction extract_code(std::string_view completion, CodeKind hint = CodeKind::none);

// What kind of code `text` is, by content; none when no kind scores enough.
CodeKind sniff_code(std::string_view text, CodeKind hint = CodeKind::none);

// Fence tag -> kind. Sets `other_language` for tags naming a language or
// format T-Rex does not execute (json, julia, bash, ...); untagged and
// text-like tags return none with other_language == false (sniffed).
CodeKind kind_for_tag(std::string_view tag, bool& other_language);

// Drops AMPL-only command lines that GNU MathProg rejects (option, reset,
// model/data FILE, include, shell, commands).
std::string normalize_mathprog(std::string_view code);

}  // namespace trex::orlib::eval
