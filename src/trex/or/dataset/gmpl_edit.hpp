#pragma once
// The MathProg data-section parser, and text edits on the GNU MathProg models
// written by the families (one statement per line, `data;` section from
// GmplData): fault injection for the T3 diagnose-and-repair task, data changes
// for T4 what-if questions, and the demo's reordered data sections.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "trex/core/rng.hpp"

namespace trex::orlib {

// The fault taxonomy of the SFT error-repair task (docs/or-datasets.md).
enum class FaultKind {
  wrong_var_type,
  dropped_constraint,
  flipped_inequality,
  wrong_coefficient,
  swapped_indices,
  missing_big_m_link,
  equality_vs_inequality,
  syntax_error,
};
const char* to_string(FaultKind kind);
const std::vector<FaultKind>& all_fault_kinds();
// Whether a translation error is a faithful symptom of this kind (a syntax error; swapped
// indices out of the set's domain; a data value outside its declared range). Other kinds
// must translate, so that the diagnosis matches the symptom.
bool may_fail_translation(FaultKind kind);

struct Fault {
  FaultKind kind = FaultKind::syntax_error;
  std::string model;      // the faulty model
  std::string location;   // e.g. "constraint Capacity", "variable y", "parameter c[C1,S2]"
  std::string diagnosis;  // what is wrong and how the repair undoes it
};

// Applies one fault of `kind`, choosing the place with `rng`; nullopt when the
// model has no place for that kind (e.g. no binary variable). The result is a
// text change only: whether it is a *real* fault is decided by solving.
std::optional<Fault> inject_fault(const std::string& gmpl, FaultKind kind, Rng& rng);

// One statement of a MathProg data section (any line layout; `#` comments).
struct DataStatement {
  enum Kind {
    set,     // set NAME := ...
    scalar,  // param NAME := v
    vector,  // param NAME := k1 v1 k2 v2 ...
    table,   // param NAME : c1 c2 ... := r1 v11 v12 ... (row-major)
    sparse,  // param NAME := [a,b] v ...
    other,   // anything else, kept as written
  } kind = other;
  std::string name;
  std::vector<std::string> keys;    // vector and sparse keys (sparse: without brackets), table rows
  std::vector<std::string> cols;    // table columns
  std::vector<std::string> values;  // scalar: 1; vector, sparse: per key; table: row-major
  std::vector<size_t> value_offsets;  // where each value starts in the parsed text
  std::string raw;                    // the statement as written (whitespace collapsed), no ';'
  bool transposed = false;            // a table written column by column (see render)
};

// The statements of a data section (the text between `data;` and `end;`), in
// order. Numeric kinds hold numbers only; anything else is `other`.
std::vector<DataStatement> parse_data_section(const std::string& data);
// A statement's tokens: split at whitespace, with ':' and ':=' tokens of their own.
std::vector<std::string> statement_tokens(const std::string& text);
// The value tokens in the order they are written (column by column when transposed).
std::vector<std::string> written_values(const DataStatement& s);
// The statement written back, ending in ";\n": a scalar or vector on one line,
// a table a line per row (per column and marked `(tr)` when transposed),
// sparse and other statements as written.
std::string render(const DataStatement& s);
// Whether `token` is a finite number (then in `value`).
bool parse_number(const std::string& token, double& value);

// One number in the data section.
struct DataValue {
  size_t line = 0;          // 0-based line index in the model
  size_t pos = 0, len = 0;  // the number's characters in that line
  std::string param;        // parameter name
  std::string key;          // "" for a scalar, else "S1" or "C1,S2"
  double value = 0.0;
};
std::vector<DataValue> data_values(const std::string& gmpl);
// Returns the model with `v` replaced by `new_value`.
std::string with_data_value(const std::string& gmpl, const DataValue& v, double new_value);
std::string describe(const DataValue& v);  // "f[S1]" or "K"

// Names of the `s.t.` constraints, in order.
std::vector<std::string> constraint_names(const std::string& gmpl);

}  // namespace trex::orlib
