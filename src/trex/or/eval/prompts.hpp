#pragma once
// `trex or prompts`: zero-shot prompts for a benchmark file (templates in
// docs/or-eval.md), as JSONL records any LLM server can answer.
#include <cstdint>
#include <string>
#include <vector>

#include "trex/or/eval/extract.hpp"

namespace trex::orlib::eval {

// The template for `format` (mathprog, lp or python) with {question} filled in.
std::string make_prompt(const std::string& question, CodeKind format);
// The template text with the literal placeholder "{question}".
const std::string& prompt_template(CodeKind format);

// Writes one record per benchmark item: {"id", "source", "format", "prompt",
// "messages": [{"role": "user", "content": prompt}]}. Returns the count.
int64_t write_prompts(const std::vector<std::string>& bench_paths, CodeKind format,
                      const std::string& out_path);

}  // namespace trex::orlib::eval
