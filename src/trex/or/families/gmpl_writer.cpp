#include "trex/or/families/gmpl_writer.hpp"

#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib {

GmplData& GmplData::set(const std::string& name, const std::vector<std::string>& elements) {
  text_ += "set " + name + " :=";
  for (const auto& e : elements) text_ += " " + e;
  text_ += ";\n";
  return *this;
}

GmplData& GmplData::param(const std::string& name, double value) {
  text_ += "param " + name + " := " + format_number(value) + ";\n";
  return *this;
}

GmplData& GmplData::param(const std::string& name, const std::vector<std::string>& keys,
                          const std::vector<double>& values) {
  require(keys.size() == values.size(), "GmplData::param: keys and values differ in length");
  text_ += "param " + name + " :=";
  for (size_t i = 0; i < keys.size(); ++i)
    text_ += "\n  " + keys[i] + " " + format_number(values[i]);
  text_ += ";\n";
  return *this;
}

GmplData& GmplData::param(const std::string& name, const std::vector<std::string>& rows,
                          const std::vector<std::string>& cols,
                          const std::vector<std::vector<double>>& values) {
  require(values.size() == rows.size(), "GmplData::param: table row count mismatch");
  text_ += "param " + name + " :";
  for (const auto& c : cols) text_ += " " + c;
  text_ += " :=";
  for (size_t r = 0; r < rows.size(); ++r) {
    require(values[r].size() == cols.size(), "GmplData::param: table column count mismatch");
    text_ += "\n  " + rows[r];
    for (double v : values[r]) text_ += " " + format_number(v);
  }
  text_ += ";\n";
  return *this;
}

GmplData& GmplData::param_sparse(
    const std::string& name,
    const std::vector<std::pair<std::vector<std::string>, double>>& entries) {
  text_ += "param " + name + " :=";
  for (const auto& [key, v] : entries) text_ += "\n  [" + join(key, ",") + "] " + format_number(v);
  text_ += ";\n";
  return *this;
}

GmplData& GmplData::set_of_tuples(const std::string& name,
                                  const std::vector<std::vector<std::string>>& tuples) {
  text_ += "set " + name + " :=";
  for (const auto& t : tuples) text_ += " (" + join(t, ",") + ")";
  text_ += ";\n";
  return *this;
}

GmplData& GmplData::raw(const std::string& line) {
  text_ += line + "\n";
  return *this;
}

std::string compose_gmpl(const std::string& model, const std::string& objective_name,
                         const GmplData& data) {
  std::string out = trim(model) + "\n\nsolve;\n\nprintf \"Optimal objective: %.10g\\n\", " +
                    objective_name + ";\n\ndata;\n\n" + data.text() + "\nend;\n";
  return out;
}

std::vector<std::string> numbered(const std::string& prefix, int n) {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 1; i <= n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

}  // namespace trex::orlib
