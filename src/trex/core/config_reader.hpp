#pragma once
// One typed reader for configuration files: JSON, or TOML read into the same
// JSON tree. Getters for required and optional keys check the type, the range
// and (for numbers) finiteness; enums come from strings with the allowed names
// in the error; a section can reject the keys nobody asked for, listing the
// allowed ones. Every error is a trex::Error naming the file, the line where
// the text gives one, and the key path ("data.seq_len", "layers[0][3]").
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trex/core/error.hpp"

namespace trex::config {

enum class Format { kJson, kToml };
Format format_of(const std::string& path);  // kToml for *.toml, kJson otherwise

// Where a value sits in a document: object keys and array indices from the root.
class Path {
 public:
  struct Step {
    std::string key;
    size_t index = 0;
    bool is_index = false;
  };

  Path child(const std::string& key) const;
  Path child(size_t index) const;
  bool empty() const { return steps_.empty(); }
  const std::vector<Step>& steps() const { return steps_; }
  std::string text() const;  // "data.seq_len", "layers[0][3]"; "" at the root

 private:
  std::vector<Step> steps_;
};

// Allowed values of a number or an integer: [min, max], or (min, max].
template <class T>
struct Range {
  T min = std::numeric_limits<T>::lowest();
  T max = std::numeric_limits<T>::max();
  bool min_exclusive = false;

  static constexpr Range at_least(T low) { return {low, std::numeric_limits<T>::max(), false}; }
  static constexpr Range above(T low) { return {low, std::numeric_limits<T>::max(), true}; }
  static constexpr Range between(T low, T high) { return {low, high, false}; }
};

// Habits of a file format that apply to every key read from it.
struct Conventions {
  // Hugging Face config.json writes unset keys as null: an optional null key
  // takes its default, a required one is missing.
  bool null_is_absent = false;
  // ... and may write 64.0 for 64: a whole float (below 9e15) reads as an integer.
  bool whole_floats_are_integers = false;
};

struct Source;  // the file name and the text it was parsed from (config_reader.cpp)

// A view of one value of a tree, with its path for errors. The key getters
// read a member of the viewed object; the as_* getters convert the viewed
// value itself (an array element, say). A reader remembers the keys asked for,
// so reject_unknown() can name the others. The tree must outlive the reader.
class Reader {
 public:
  // A tree that was not parsed from text here (built in code, or passed to a
  // from_json): errors name `file` but no line. The root must be an object.
  Reader(const nlohmann::json& tree, std::string file, Conventions conventions = {});

  const nlohmann::json& value() const { return *value_; }
  const Path& path() const { return path_; }
  bool is_null() const { return value_->is_null(); }
  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }

  // ---- the viewed value
  bool as_boolean() const;
  // Out of `range` or of Int's own range is an error. uint64_t also takes its
  // decimal text ("18446744073709551615"): JSON tools that read numbers as
  // doubles would round it.
  template <class Int = int64_t>
  Int as_integer(Range<Int> range = {}) const;
  double as_number(Range<double> range = {}) const;  // finite
  std::string as_string() const;
  template <class Enum>
  Enum as_enum(
      std::initializer_list<std::pair<const char*, std::type_identity_t<Enum>>> names) const {
    std::vector<std::string> texts;
    for (const auto& name : names) texts.emplace_back(name.first);
    return (names.begin() + static_cast<std::ptrdiff_t>(index_in(texts)))->second;
  }

  // ---- an array
  size_t size() const { return value_->size(); }
  Reader operator[](size_t index) const;  // an element; errors when out of range
  std::vector<double> numbers(Range<double> range = {}) const;
  template <class Int = int64_t>
  std::vector<Int> integers(Range<Int> range = {}) const;

  // ---- the members of an object
  // Present, and not null under Conventions::null_is_absent.
  bool has(const std::string& key) const;
  bool contains(const std::string& key) const;  // present, null or not
  Reader at(const std::string& key) const;  // present (null or not), else "required key is missing"

  bool boolean(const std::string& key) const;
  bool boolean(const std::string& key, bool fallback) const;
  template <class Int = int64_t>
  Int integer(const std::string& key, Range<Int> range = {}) const {
    return required(key).template as_integer<Int>(range);
  }
  template <class Int = int64_t>
  Int integer(const std::string& key, std::type_identity_t<Int> fallback,
              Range<Int> range = {}) const {
    return has(key) ? at(key).template as_integer<Int>(range) : fallback;
  }
  double number(const std::string& key, Range<double> range = {}) const;
  double number(const std::string& key, double fallback, Range<double> range = {}) const;
  std::string string(const std::string& key) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  template <class Enum>
  Enum choice(
      const std::string& key, Enum fallback,
      std::initializer_list<std::pair<const char*, std::type_identity_t<Enum>>> names) const {
    return has(key) ? at(key).as_enum<Enum>(names) : fallback;
  }
  Reader object(const std::string& key) const;   // required
  Reader section(const std::string& key) const;  // optional: an empty object when absent
  Reader array(const std::string& key) const;    // required

  // Fails at the first key that was neither asked for nor in `also_allowed`,
  // listing the allowed keys (and the nearest one, when close).
  void reject_unknown(std::initializer_list<std::string_view> also_allowed = {}) const;

  // A trex::Error located at this value: the file, its line, its path.
  [[noreturn]] void fail(const std::string& message) const { throw error(message); }
  // The same at `key` of this object (when it is absent, at the nearest line above).
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

 private:
  friend class Document;
  Reader(const nlohmann::json& value, std::shared_ptr<const Source> source, Path path,
         Conventions conventions);
  Reader child(const nlohmann::json& value, Path path) const;
  Error error(const std::string& message) const;  // located at this value
  Reader required(const std::string& key) const;  // has(key), else "required key is missing"
  void require_object() const;
  size_t index_in(const std::vector<std::string>& names) const;
  [[noreturn]] void fail_at(const Path& path, const std::string& message) const;

  const nlohmann::json* value_;
  std::shared_ptr<const Source> source_;
  Path path_;
  Conventions conventions_;
  mutable std::set<std::string, std::less<>> asked_;
};

extern template int Reader::as_integer<int>(Range<int>) const;
extern template int64_t Reader::as_integer<int64_t>(Range<int64_t>) const;
extern template uint64_t Reader::as_integer<uint64_t>(Range<uint64_t>) const;
extern template std::vector<int> Reader::integers<int>(Range<int>) const;
extern template std::vector<int64_t> Reader::integers<int64_t>(Range<int64_t>) const;

// A parsed configuration file: its tree and, for errors, its text.
class Document {
 public:
  // Syntax errors (and numbers beyond the double range) are trex::Errors with
  // the file and line.
  static Document parse(std::string text, Format format, std::string file);
  static Document load(const std::string& path, Format format);

  const nlohmann::json& tree() const { return tree_; }
  Reader root(Conventions conventions = {}) const;  // the top level must be an object

 private:
  Document(nlohmann::json tree, std::shared_ptr<const Source> source)
      : tree_(std::move(tree)), source_(std::move(source)) {}
  nlohmann::json tree_;
  std::shared_ptr<const Source> source_;
};

}  // namespace trex::config
