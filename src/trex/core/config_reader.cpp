#include "trex/core/config_reader.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <sstream>
#include <utility>

#include "trex/core/atomic_file.hpp"

namespace trex::config {

using json = nlohmann::json;

struct Source {
  std::string file;
  std::string text;  // empty: a tree built in code, no lines
  Format format = Format::kJson;

  // The line of the deepest value on `path` that the text holds (so a missing
  // key gets the line of its section); 0 at the root or without text.
  long line_of(const Path& path) const;
};

namespace {

// ---------------------------------------------------------------- lines

long count_lines(const char* begin, const char* end) {
  return 1 + static_cast<long>(std::count(begin, end, '\n'));
}

// A const char* that records how far the JSON parser has read, so a parse
// callback (or a parse error) can be given a line.
class TrackedChars {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackedChars(const char* at, const char** read_up_to) : at_(at), read_up_to_(read_up_to) {}
  reference operator*() const { return *at_; }
  TrackedChars& operator++() {
    *read_up_to_ = ++at_;
    return *this;
  }
  TrackedChars operator++(int) {
    TrackedChars before = *this;
    ++*this;
    return before;
  }
  bool operator==(const TrackedChars& other) const { return at_ == other.at_; }

 private:
  const char* at_;
  const char** read_up_to_;
};

// Parses `text` as nlohmann::json::parse does; `on_event` (may be null) sees
// each parse event with the line of the token just read.
json parse_tracked(const std::string& text, const std::string& file,
                   const std::function<void(json::parse_event_t, const json&, long)>& on_event) {
  const char* begin = text.data();
  const char* read_up_to = begin;
  // The last character read ends the current token, or is the one character
  // of look-ahead after a number: either way it is on the token's line unless
  // it is the newline after it, which the count leaves out.
  auto current_line = [&] {
    return count_lines(begin, read_up_to > begin ? read_up_to - 1 : begin);
  };
  json::parser_callback_t callback = nullptr;
  if (on_event) {
    callback = [&](int, json::parse_event_t event, json& parsed) {
      on_event(event, parsed, current_line());
      return true;
    };
  }
  try {
    return json::parse(TrackedChars(begin, &read_up_to),
                       TrackedChars(begin + text.size(), &read_up_to), callback);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw Error(std::string("invalid JSON: ") + e.what()).file(file).line(current_line());
  }
}

long json_line_of(const std::string& text, const Path& target) {
  const std::vector<Path::Step>& steps = target.steps();
  struct Open {
    bool array;
    bool on_target;  // this container's path is a prefix of the target
    size_t depth;    // its path's length
    size_t next_index = 0;
    bool member_on_target = false;  // objects: the key just read continues the target
  };
  std::vector<Open> open;
  long line = 0;
  size_t line_depth = 0;
  auto found = [&](size_t depth, long at) {
    if (depth >= line_depth) line = at, line_depth = depth;  // a repeated key: the last one wins
  };
  // Called once per value as it starts; true when its path is a prefix of the target.
  auto starts_on_target = [&]() {
    if (open.empty()) return true;
    Open& parent = open.back();
    if (!parent.array) return parent.member_on_target;
    const size_t index = parent.next_index++;
    return parent.on_target && parent.depth < steps.size() && steps[parent.depth].is_index &&
           steps[parent.depth].index == index;
  };
  auto on_event = [&](json::parse_event_t event, const json& parsed, long at) {
    switch (event) {
      case json::parse_event_t::key: {
        Open& object = open.back();
        object.member_on_target = object.on_target && object.depth < steps.size() &&
                                  !steps[object.depth].is_index &&
                                  steps[object.depth].key == parsed.get_ref<const std::string&>();
        if (object.member_on_target) found(object.depth + 1, at);  // a member's line is its key's
        break;
      }
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        const bool in_array = !open.empty() && open.back().array;
        const size_t depth = open.empty() ? 0 : open.back().depth + 1;
        const bool on_target = starts_on_target();
        if (on_target && in_array) found(depth, at);
        open.push_back({event == json::parse_event_t::array_start, on_target, depth});
        break;
      }
      case json::parse_event_t::value:
        if (!open.empty() && open.back().array && starts_on_target())
          found(open.back().depth + 1, at);
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        open.pop_back();
        break;
    }
  };
  try {
    parse_tracked(text, "", on_event);
  } catch (const Error&) {
    return 0;  // not reached: the text parsed before
  }
  return line;
}

long toml_line_of(const std::string& text, const std::string& file, const Path& target) {
  try {
    const toml::table table = toml::parse(text, file);
    const toml::node* node = &table;
    long line = 0;
    for (const Path::Step& step : target.steps()) {
      if (step.is_index) {
        const toml::array* array = node->as_array();
        node = array != nullptr ? array->get(step.index) : nullptr;
      } else {
        const toml::table* members = node->as_table();
        node = members != nullptr ? members->get(step.key) : nullptr;
      }
      if (node == nullptr) break;
      line = static_cast<long>(node->source().begin.line);
    }
    return line;
  } catch (const toml::parse_error&) {
    return 0;  // not reached: the text parsed before
  }
}

// TOML tables, arrays and values as the JSON tree the reader walks.
json toml_to_json(const toml::node& node) {
  if (const auto* table = node.as_table()) {
    json out = json::object();
    for (const auto& [key, value] : *table) out[std::string(key.str())] = toml_to_json(value);
    return out;
  }
  if (const auto* array = node.as_array()) {
    json out = json::array();
    for (const auto& value : *array) out.push_back(toml_to_json(value));
    return out;
  }
  if (const auto* v = node.as_string()) return v->get();
  if (const auto* v = node.as_integer()) return v->get();
  if (const auto* v = node.as_floating_point()) return v->get();
  if (const auto* v = node.as_boolean()) return v->get();
  std::ostringstream text;  // dates and times: kept as their TOML text
  if (const auto* v = node.as_date()) text << v->get();
  if (const auto* v = node.as_time()) text << v->get();
  if (const auto* v = node.as_date_time()) text << v->get();
  return text.str();
}

// ---------------------------------------------------------------- messages

std::string number_text(double value) {
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof(buffer), value).ptr;
  return std::string(buffer, end);
}

template <class T>
std::string bound_text(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return number_text(value);
  } else {
    return std::to_string(value);
  }
}

template <class T>
std::string range_text(const Range<T>& range) {
  const bool low = range.min != std::numeric_limits<T>::lowest() || range.min_exclusive;
  const bool high = range.max != std::numeric_limits<T>::max();
  if (low == high)  // both bounds, or only the type's own (an integer too large for it)
    return std::string("in ") + (range.min_exclusive ? "(" : "[") + bound_text(range.min) + ", " +
           bound_text(range.max) + "]";
  if (high) return "<= " + bound_text(range.max);
  return (range.min_exclusive ? "> " : ">= ") + bound_text(range.min);
}

// What a value is, for "expected X, got Y": numbers by value, the rest by type.
std::string got(const json& value) {
  if (value.is_number_float()) {
    std::string text = number_text(value.get<double>());
    // 64.0 rather than 64: the reason an integer was refused.
    if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
    return text;
  }
  if (value.is_number()) return value.dump();
  return value.type_name();
}

// Edit distance, for "did you mean".
size_t distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

const json& empty_object() {
  static const json kEmpty = json::object();
  return kEmpty;
}

}  // namespace

Format format_of(const std::string& path) {
  return std::filesystem::path(path).extension() == ".toml" ? Format::kToml : Format::kJson;
}

// ---------------------------------------------------------------- Path

Path Path::child(const std::string& key) const {
  Path out = *this;
  out.steps_.push_back({key, 0, false});
  return out;
}

Path Path::child(size_t index) const {
  Path out = *this;
  out.steps_.push_back({"", index, true});
  return out;
}

std::string Path::text() const {
  std::string out;
  for (const Step& step : steps_) {
    if (step.is_index) {
      out += "[" + std::to_string(step.index) + "]";
    } else {
      if (!out.empty()) out += ".";
      out += step.key;
    }
  }
  return out;
}

long Source::line_of(const Path& path) const {
  if (text.empty() || path.empty()) return 0;
  return format == Format::kToml ? toml_line_of(text, file, path) : json_line_of(text, path);
}

// ---------------------------------------------------------------- Document

Document Document::parse(std::string text, Format format, std::string file) {
  json tree;
  if (format == Format::kToml) {
    try {
      tree = toml_to_json(toml::parse(text, file));
    } catch (const toml::parse_error& e) {
      throw Error(std::string("invalid TOML: ") + std::string(e.description()))
          .file(file)
          .line(static_cast<long>(e.source().begin.line));
    }
  } else {
    tree = parse_tracked(text, file, nullptr);
  }
  auto source = std::make_shared<Source>(Source{std::move(file), std::move(text), format});
  return Document(std::move(tree), std::move(source));
}

Document Document::load(const std::string& path, Format format) {
  return parse(read_file(path), format, path);
}

Reader Document::root(Conventions conventions) const {
  Reader root(tree_, source_, Path(), conventions);
  root.require_object();
  return root;
}

// ---------------------------------------------------------------- Reader

Reader::Reader(const json& tree, std::string file, Conventions conventions)
    : Reader(tree, std::make_shared<Source>(Source{std::move(file), "", Format::kJson}), Path(),
             conventions) {
  require_object();
}

Reader::Reader(const json& value, std::shared_ptr<const Source> source, Path path,
               Conventions conventions)
    : value_(&value),
      source_(std::move(source)),
      path_(std::move(path)),
      conventions_(conventions) {}

Reader Reader::child(const json& value, Path path) const {
  return Reader(value, source_, std::move(path), conventions_);
}

void Reader::require_object() const {
  if (is_object()) return;
  if (path_.empty()) fail("expected an object at the top level, got " + got(*value_));
  fail("expected an object, got " + got(*value_));
}

Error Reader::error(const std::string& message) const {
  Error e(message);
  if (!source_->file.empty()) e.file(source_->file);
  if (const long line = source_->line_of(path_); line > 0) e.line(line);
  if (!path_.empty()) e.field(path_.text());
  return e;
}

void Reader::fail_at(const Path& path, const std::string& message) const {
  throw child(*value_, path).error(message);
}

void Reader::fail(const std::string& key, const std::string& message) const {
  fail_at(path_.child(key), message);
}

// ---- the viewed value

bool Reader::as_boolean() const {
  if (!value_->is_boolean()) fail("expected a boolean, got " + got(*value_));
  return value_->get<bool>();
}

template <class Int>
Int Reader::as_integer(Range<Int> range) const {
  const json& v = *value_;
  auto check = [&](auto value) {
    const bool low = range.min_exclusive ? std::cmp_greater(value, range.min)
                                         : std::cmp_greater_equal(value, range.min);
    if (!low || std::cmp_greater(value, range.max))
      fail("must be " + range_text(range) + ", got " + std::to_string(value));
    return static_cast<Int>(value);
  };
  if constexpr (std::is_same_v<Int, uint64_t>) {
    if (v.is_string()) {
      const std::string& text = v.get_ref<const std::string&>();
      uint64_t value = 0;
      const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || status != std::errc() || end != text.data() + text.size())
        fail("expected a non-negative integer or its decimal text, got \"" + text + "\"");
      return check(value);
    }
  }
  if (v.is_number_unsigned()) return check(v.get<uint64_t>());
  if (v.is_number_integer()) return check(v.get<int64_t>());
  if (v.is_number_float() && conventions_.whole_floats_are_integers) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
      return check(static_cast<int64_t>(d));
  }
  fail("expected an integer, got " + got(v));
}

template int Reader::as_integer<int>(Range<int>) const;
template int64_t Reader::as_integer<int64_t>(Range<int64_t>) const;
template uint64_t Reader::as_integer<uint64_t>(Range<uint64_t>) const;

namespace {

bool in_range(double value, const Range<double>& range) {
  return (range.min_exclusive ? value > range.min : value >= range.min) && value <= range.max;
}

}  // namespace

double Reader::as_number(Range<double> range) const {
  if (!value_->is_number()) fail("expected a number, got " + got(*value_));
  const double value = value_->get<double>();
  // TOML has inf and nan; JSON (what the to_json writers produce) has neither.
  if (!std::isfinite(value)) fail("expected a finite number, got " + number_text(value));
  if (!in_range(value, range)) fail("must be " + range_text(range) + ", got " + number_text(value));
  return value;
}

std::string Reader::as_string() const {
  if (!value_->is_string()) fail("expected a string, got " + got(*value_));
  return value_->get<std::string>();
}

size_t Reader::index_in(const std::vector<std::string>& names) const {
  const std::string text = as_string();
  const auto it = std::find(names.begin(), names.end(), text);
  if (it != names.end()) return static_cast<size_t>(it - names.begin());
  std::string allowed;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) allowed += i + 1 == names.size() ? " or " : ", ";
    allowed += "\"" + names[i] + "\"";
  }
  fail("must be " + allowed + ", got \"" + text + "\"");
}

// ---- an array

Reader Reader::operator[](size_t index) const {
  if (!is_array()) fail("expected an array, got " + got(*value_));
  if (index >= size())
    fail("has " + std::to_string(size()) + " elements, no element " + std::to_string(index));
  return child((*value_)[index], path_.child(index));
}

std::vector<double> Reader::numbers(Range<double> range) const {
  if (!is_array()) fail("expected an array, got " + got(*value_));
  std::vector<double> out;
  out.reserve(size());
  for (size_t i = 0; i < size(); ++i) {
    // Element readers (with their paths) only for the error: profiles hold millions.
    const json& v = (*value_)[i];
    const double value = v.is_number() ? v.get<double>() : 0.0;
    out.push_back(v.is_number() && std::isfinite(value) && in_range(value, range)
                      ? value
                      : (*this)[i].as_number(range));
  }
  return out;
}

template <class Int>
std::vector<Int> Reader::integers(Range<Int> range) const {
  if (!is_array()) fail("expected an array, got " + got(*value_));
  std::vector<Int> out;
  out.reserve(size());
  for (size_t i = 0; i < size(); ++i) out.push_back((*this)[i].as_integer<Int>(range));
  return out;
}

template std::vector<int> Reader::integers<int>(Range<int>) const;
template std::vector<int64_t> Reader::integers<int64_t>(Range<int64_t>) const;

// ---- the members of an object

bool Reader::contains(const std::string& key) const {
  asked_.insert(key);
  return is_object() && value_->contains(key);
}

bool Reader::has(const std::string& key) const {
  return contains(key) && !(conventions_.null_is_absent && value_->at(key).is_null());
}

Reader Reader::at(const std::string& key) const {
  require_object();
  if (!contains(key)) fail(key, "required key is missing");
  return child(value_->at(key), path_.child(key));
}

Reader Reader::required(const std::string& key) const {
  require_object();
  if (!has(key)) fail(key, "required key is missing");
  return at(key);
}

bool Reader::boolean(const std::string& key) const {
  return required(key).as_boolean();
}

bool Reader::boolean(const std::string& key, bool fallback) const {
  return has(key) ? at(key).as_boolean() : fallback;
}

double Reader::number(const std::string& key, Range<double> range) const {
  return required(key).as_number(range);
}

double Reader::number(const std::string& key, double fallback, Range<double> range) const {
  return has(key) ? at(key).as_number(range) : fallback;
}

std::string Reader::string(const std::string& key) const {
  return required(key).as_string();
}

std::string Reader::string(const std::string& key, const std::string& fallback) const {
  return has(key) ? at(key).as_string() : fallback;
}

Reader Reader::object(const std::string& key) const {
  Reader member = required(key);
  member.require_object();
  return member;
}

Reader Reader::section(const std::string& key) const {
  if (!has(key)) return child(empty_object(), path_.child(key));
  return object(key);
}

Reader Reader::array(const std::string& key) const {
  Reader member = required(key);
  if (!member.is_array()) member.fail("expected an array, got " + got(member.value()));
  return member;
}

void Reader::reject_unknown(std::initializer_list<std::string_view> also_allowed) const {
  if (!is_object()) return;
  std::set<std::string, std::less<>> allowed = asked_;
  for (std::string_view key : also_allowed) allowed.emplace(key);
  for (const auto& [key, value] : value_->items()) {
    if (allowed.count(key)) continue;
    std::string names, nearest;
    size_t nearest_distance = 3;  // suggest only a near miss
    for (const std::string& name : allowed) {
      names += (names.empty() ? "" : ", ") + name;
      const size_t d = distance(key, name);
      if (d < nearest_distance && d < name.size()) nearest = name, nearest_distance = d;
    }
    fail(key, "unknown key (" + (nearest.empty() ? "" : "did you mean '" + nearest + "'? ") +
                  "allowed: " + names + ")");
  }
}

}  // namespace trex::config
