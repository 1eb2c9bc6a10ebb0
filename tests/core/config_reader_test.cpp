// The typed config reader: each getter, ranges, enums, arrays, nested paths,
// unknown keys, line numbers in JSON and TOML, and JSON and TOML giving the
// same tree.
#include "trex/core/config_reader.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"

namespace trex::config {
namespace {

using json = nlohmann::json;

// The error `fn` throws, as the CLI prints it ("" when it does not throw).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Error caught(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error("");
}

TEST(ConfigReader, RequiredAndOptionalGetters) {
  const json tree = json::parse(R"({"flag": true, "count": 7, "rate": 0.5, "name": "x",
                                    "big": 18446744073709551615, "seed": "18446744073709551615",
                                    "whole": 3, "nested": {"inner": {"depth": 2}}})");
  const Reader r(tree, "c.json");
  EXPECT_TRUE(r.boolean("flag"));
  EXPECT_FALSE(r.boolean("absent", false));
  EXPECT_EQ(r.integer("count"), 7);
  EXPECT_EQ(r.integer("absent", 11), 11);
  EXPECT_EQ(r.integer<int>("count"), 7);
  EXPECT_DOUBLE_EQ(r.number("rate"), 0.5);
  EXPECT_DOUBLE_EQ(r.number("whole"), 3.0);  // an integer is a number
  EXPECT_DOUBLE_EQ(r.number("absent", 2.5), 2.5);
  EXPECT_EQ(r.string("name"), "x");
  EXPECT_EQ(r.string("absent", "fallback"), "fallback");
  EXPECT_EQ(r.integer<uint64_t>("big"), 18446744073709551615ull);
  EXPECT_EQ(r.integer<uint64_t>("seed"), 18446744073709551615ull);
  EXPECT_EQ(r.object("nested").object("inner").integer("depth"), 2);
  EXPECT_TRUE(r.has("flag"));
  EXPECT_FALSE(r.has("absent"));

  EXPECT_EQ(error_of([&] { r.integer("absent"); }),
            "c.json: field 'absent': required key is missing");
  EXPECT_EQ(error_of([&] { r.object("nested").object("inner").string("name"); }),
            "c.json: field 'nested.inner.name': required key is missing");
  // An absent section reads as empty; its keys take their defaults.
  const Reader none = r.section("none");
  EXPECT_EQ(none.integer("k", 4), 4);
  EXPECT_EQ(none.path().text(), "none");
}

TEST(ConfigReader, TypeErrorsSayWhatWasFound) {
  const json tree =
      json::parse(R"({"s": "long", "f": 8.5, "n": 1, "list": [1], "object": {}, "null": null})");
  const Reader r(tree, "c.json");
  EXPECT_EQ(error_of([&] { r.integer("s"); }),
            "c.json: field 's': expected an integer, got string");
  EXPECT_EQ(error_of([&] { r.integer("f"); }), "c.json: field 'f': expected an integer, got 8.5");
  EXPECT_EQ(error_of([&] { r.boolean("n"); }), "c.json: field 'n': expected a boolean, got 1");
  EXPECT_EQ(error_of([&] { r.string("n"); }), "c.json: field 'n': expected a string, got 1");
  EXPECT_EQ(error_of([&] { r.number("s"); }), "c.json: field 's': expected a number, got string");
  EXPECT_EQ(error_of([&] { r.object("list"); }),
            "c.json: field 'list': expected an object, got array");
  EXPECT_EQ(error_of([&] { r.array("object"); }),
            "c.json: field 'object': expected an array, got object");
  // Without Conventions::null_is_absent a null is a value of the wrong type.
  EXPECT_EQ(error_of([&] { r.integer("null", 1); }),
            "c.json: field 'null': expected an integer, got null");
  EXPECT_EQ(error_of([&] { r.section("null"); }),
            "c.json: field 'null': expected an object, got null");
  EXPECT_EQ(error_of([] { Reader(json::array(), "c.json"); }),
            "c.json: expected an object at the top level, got array");
}

TEST(ConfigReader, RangesOfIntegersAndNumbers) {
  const json tree =
      json::parse(R"({"zero": 0, "huge": 1099511627776, "negative": -1, "half": 0.5, "two": 2.0})");
  const Reader r(tree, "c.json");
  EXPECT_EQ(error_of([&] { r.integer("zero", Range<int64_t>::between(1, 16)); }),
            "c.json: field 'zero': must be in [1, 16], got 0");
  EXPECT_EQ(error_of([&] { r.integer("zero", Range<int64_t>::at_least(1)); }),
            "c.json: field 'zero': must be >= 1, got 0");
  EXPECT_EQ(error_of([&] { r.integer("huge", Range<int64_t>{.max = 3}); }),
            "c.json: field 'huge': must be <= 3, got 1099511627776");
  // Beyond the target type is a range error, not a silent wrap.
  EXPECT_EQ(error_of([&] { r.integer<int>("huge"); }),
            "c.json: field 'huge': must be in [-2147483648, 2147483647], got 1099511627776");
  EXPECT_EQ(error_of([&] { r.integer<uint64_t>("negative"); }),
            "c.json: field 'negative': must be in [0, 18446744073709551615], got -1");
  EXPECT_EQ(error_of([&] { r.number("zero", Range<double>::above(0)); }),
            "c.json: field 'zero': must be > 0, got 0");
  EXPECT_EQ(error_of([&] { r.number("two", Range<double>::between(1e-3, 1)); }),
            "c.json: field 'two': must be in [0.001, 1], got 2");
  EXPECT_DOUBLE_EQ(r.number("half", Range<double>::between(0, 1)), 0.5);
  EXPECT_EQ(r.integer("zero", Range<int64_t>::at_least(0)), 0);
  // A fallback is the caller's own value: not range-checked.
  EXPECT_EQ(r.integer("absent", 0, Range<int64_t>::at_least(1)), 0);
  // Decimal text is for uint64_t only, and only plain digits.
  const json seeds =
      json::parse(R"({"a": "12", "b": "-1", "c": " 5", "d": "", "e": "99999999999999999999"})");
  const Reader s(seeds, "s.json");
  EXPECT_EQ(s.integer<uint64_t>("a"), 12u);
  for (const char* bad : {"b", "c", "d", "e"})
    EXPECT_NE(error_of([&] { s.integer<uint64_t>(bad); }).find("expected a non-negative integer"),
              std::string::npos)
        << bad;
  EXPECT_EQ(error_of([&] { s.integer("a"); }),
            "s.json: field 'a': expected an integer, got string");
}

TEST(ConfigReader, NumbersMustBeFinite) {
  const Document toml =
      Document::parse("clip = inf\nlr = nan\nok = 1.5\n", Format::kToml, "run.toml");
  const Reader r = toml.root();
  EXPECT_EQ(error_of([&] { r.number("clip"); }),
            "run.toml:1: field 'clip': expected a finite number, got inf");
  EXPECT_NE(
      error_of([&] { r.number("lr"); }).find("run.toml:2: field 'lr': expected a finite number"),
      std::string::npos);
  EXPECT_DOUBLE_EQ(r.number("ok"), 1.5);
  const json tree = {{"x", std::nan("")}};
  EXPECT_NE(error_of([&] { Reader(tree, "t").number("x"); }).find("expected a finite number"),
            std::string::npos);
}

enum class Mode { kCpt, kSft, kRl };

TEST(ConfigReader, EnumsNameTheAllowedValues) {
  const json tree = json::parse(R"({"mode": "sft", "bad": "dpo", "three": "x", "n": 3})");
  const Reader r(tree, "c.json");
  EXPECT_EQ(r.choice("mode", Mode::kCpt, {{"cpt", Mode::kCpt}, {"sft", Mode::kSft}}), Mode::kSft);
  EXPECT_EQ(r.choice("absent", Mode::kRl, {{"cpt", Mode::kCpt}}), Mode::kRl);
  EXPECT_EQ(error_of([&] {
              r.choice("bad", Mode::kCpt, {{"cpt", Mode::kCpt}, {"sft", Mode::kSft}});
            }),
            "c.json: field 'bad': must be \"cpt\" or \"sft\", got \"dpo\"");
  EXPECT_EQ(error_of([&] {
              r.choice("three", Mode::kCpt,
                       {{"cpt", Mode::kCpt}, {"sft", Mode::kSft}, {"rl", Mode::kRl}});
            }),
            "c.json: field 'three': must be \"cpt\", \"sft\" or \"rl\", got \"x\"");
  EXPECT_EQ(error_of([&] {
              r.choice("n", Mode::kCpt, {{"cpt", Mode::kCpt}});
            }),
            "c.json: field 'n': expected a string, got 3");
}

TEST(ConfigReader, ArraysAndElementPaths) {
  const json tree = json::parse(R"({"layers": [[1, 2], [3, -4]], "owners": [0, 1, 2.5],
                                    "names": ["a", 1], "scalar": 5})");
  const Reader r(tree, "c.json");
  const Reader layers = r.array("layers");
  EXPECT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].numbers(), (std::vector<double>{1, 2}));
  EXPECT_EQ(layers[0].integers(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(layers[1][0].as_integer<int>(), 3);
  EXPECT_EQ(layers[1].path().text(), "layers[1]");
  EXPECT_EQ(error_of([&] { layers[1].numbers(Range<double>::at_least(0)); }),
            "c.json: field 'layers[1][1]': must be >= 0, got -4");
  EXPECT_EQ(error_of([&] { r.array("owners").integers<int>(); }),
            "c.json: field 'owners[2]': expected an integer, got 2.5");
  EXPECT_EQ(error_of([&] { r.array("names")[1].as_string(); }),
            "c.json: field 'names[1]': expected a string, got 1");
  EXPECT_EQ(error_of([&] { layers[2]; }), "c.json: field 'layers': has 2 elements, no element 2");
  EXPECT_EQ(error_of([&] { r.at("scalar")[0]; }),
            "c.json: field 'scalar': expected an array, got 5");
  EXPECT_EQ(error_of([&] { r.at("scalar").numbers(); }),
            "c.json: field 'scalar': expected an array, got 5");
}

TEST(ConfigReader, UnknownKeysListTheAllowedOnes) {
  const json tree =
      json::parse(R"({"schedule": {"peak_lr": 1, "peek_lr": 2}, "zzz": 1, "name": "n"})");
  const Reader r(tree, "run.json");
  const Reader schedule = r.section("schedule");
  schedule.number("peak_lr", 0.0);
  schedule.number("min_lr", 0.0);
  EXPECT_EQ(error_of([&] { schedule.reject_unknown(); }),
            "run.json: field 'schedule.peek_lr': unknown key (did you mean 'peak_lr'? allowed: "
            "min_lr, peak_lr)");
  // No suggestion when nothing is close; keys allowed without being read.
  EXPECT_EQ(error_of([&] { r.reject_unknown({"name"}); }),
            "run.json: field 'zzz': unknown key (allowed: name, schedule)");
  EXPECT_EQ(error_of([&] { r.reject_unknown({"name", "zzz"}); }), "");
}

TEST(ConfigReader, HuggingFaceConventions) {
  const json tree = json::parse(R"({"rope_scaling": null, "size": 64.0, "half": 64.5,
                                    "huge": 1e16, "eos": null})");
  const Conventions hf{.null_is_absent = true, .whole_floats_are_integers = true};
  const Reader r(tree, "config.json", hf);
  EXPECT_FALSE(r.has("rope_scaling"));
  EXPECT_TRUE(r.contains("eos"));
  EXPECT_TRUE(r.at("eos").is_null());
  EXPECT_EQ(r.integer("rope_scaling", 7), 7);
  EXPECT_EQ(error_of([&] { r.integer("rope_scaling"); }),
            "config.json: field 'rope_scaling': required key is missing");
  EXPECT_EQ(r.integer("size"), 64);
  EXPECT_EQ(error_of([&] { r.integer("half"); }),
            "config.json: field 'half': expected an integer, got 64.5");
  EXPECT_EQ(error_of([&] { r.integer("huge"); }),
            "config.json: field 'huge': expected an integer, got 1e+16");
  // The strict default: a whole float is not an integer.
  EXPECT_EQ(error_of([&] { Reader(tree, "c.json").integer("size"); }),
            "c.json: field 'size': expected an integer, got 64.0");
}

TEST(ConfigReader, JsonErrorsCarryTheLine) {
  const std::string text = R"({
  "model": {"config": "m.json"},
  "data": {
    "mode": "sft",
    "seq_len":
      "long",
    "ratios": [0,
               4,
               "x"],
    "bad": 7
  },
  "rows": [[1, 2],
           [3,
            4]]
})";
  const Document document = Document::parse(text, Format::kJson, "run.json");
  const Reader root = document.root();
  const Reader data = root.section("data");
  // A member's line is its key's.
  const Error type = caught([&] { data.integer("seq_len"); });
  EXPECT_EQ(type.file_name(), "run.json");
  EXPECT_EQ(type.line_number(), 5);
  EXPECT_EQ(type.field_name(), "data.seq_len");
  EXPECT_STREQ(type.what(), "run.json:5: field 'data.seq_len': expected an integer, got string");
  // Array elements, a number followed by a newline included.
  EXPECT_EQ(caught([&] { data.array("ratios").integers(); }).line_number(), 9);
  EXPECT_EQ(caught([&] { data.array("ratios")[1].fail("no"); }).line_number(), 8);
  EXPECT_EQ(caught([&] { root.array("rows")[1][1].fail("no"); }).line_number(), 14);
  EXPECT_EQ(caught([&] { root.array("rows")[1].fail("no"); }).line_number(), 13);
  // A missing key gets the line of its section; an unknown one its own.
  EXPECT_EQ(caught([&] { data.integer("steps"); }).line_number(), 3);
  data.choice("mode", 0, {{"sft", 1}});
  data.array("ratios");
  data.at("seq_len");
  EXPECT_EQ(caught([&] { data.reject_unknown(); }).line_number(), 10);
  // The root has no line of its own.
  EXPECT_EQ(caught([&] { root.integer("steps"); }).line_number(), 0);
  // A repeated key: the last one is the value, and its line is given.
  const Document repeated = Document::parse("{\"a\": 1,\n \"a\": \"x\"}", Format::kJson, "r.json");
  EXPECT_EQ(caught([&] { repeated.root().integer("a"); }).line_number(), 2);
}

TEST(ConfigReader, SyntaxErrorsCarryTheLine) {
  const Error comma =
      caught([] { Document::parse("{\n  \"steps\": 3,\n}\n", Format::kJson, "bad.json"); });
  EXPECT_EQ(comma.file_name(), "bad.json");
  EXPECT_EQ(comma.line_number(), 3);
  EXPECT_NE(std::string(comma.what()).find("invalid JSON"), std::string::npos);
  // A number beyond the double range is nlohmann's out_of_range, not a parse error.
  const Error overflow =
      caught([] { Document::parse("{\"a\": 1,\n \"b\": 1e999\n}", Format::kJson, "big.json"); });
  EXPECT_EQ(overflow.line_number(), 2);
  EXPECT_NE(std::string(overflow.what()).find("invalid JSON"), std::string::npos);
  const Error toml =
      caught([] { Document::parse("steps = 3\nseq_len = = 4\n", Format::kToml, "bad.toml"); });
  EXPECT_EQ(toml.file_name(), "bad.toml");
  EXPECT_EQ(toml.line_number(), 2);
  EXPECT_NE(std::string(toml.what()).find("invalid TOML"), std::string::npos);
}

TEST(ConfigReader, TomlGivesTheSameTreeAsJson) {
  const Document from_toml = Document::parse(R"(# comment
tokenizer = "tok.json"
seq_len = 128
clip = 1.0
flags = [true, false]

[optimizer]
use_muon = true
adamw = { beta1 = 0.9, eps = 1e-20 }

[[stages]]
steps = 1

[[stages]]
steps = 2
)",
                                             Format::kToml, "run.toml");
  const Document from_json = Document::parse(R"({
  "tokenizer": "tok.json", "seq_len": 128, "clip": 1.0, "flags": [true, false],
  "optimizer": {"use_muon": true, "adamw": {"beta1": 0.9, "eps": 1e-20}},
  "stages": [{"steps": 1}, {"steps": 2}]
})",
                                             Format::kJson, "run.json");
  EXPECT_EQ(from_toml.tree(), from_json.tree());
  EXPECT_TRUE(from_toml.tree()["seq_len"].is_number_integer());
  EXPECT_TRUE(from_toml.tree()["clip"].is_number_float());

  // TOML lines: a value's own line, a section's header for a missing key.
  const Reader root = from_toml.root();
  EXPECT_EQ(caught([&] { root.string("seq_len"); }).line_number(), 3);
  EXPECT_EQ(caught([&] { root.object("optimizer").object("adamw").string("eps"); }).line_number(),
            9);
  EXPECT_EQ(caught([&] { root.object("optimizer").integer("steps"); }).line_number(), 7);
  EXPECT_EQ(caught([&] { root.array("stages")[1].string("steps"); }).line_number(), 15);
  EXPECT_STREQ(caught([&] { root.string("seq_len"); }).what(),
               "run.toml:3: field 'seq_len': expected a string, got 128");
}

TEST(ConfigReader, TreesFromCodeNameTheFileButNoLine) {
  const json tree = {{"a", {{"b", "x"}}}};
  const Error e = caught([&] { Reader(tree, "saved").object("a").integer("b"); });
  EXPECT_EQ(e.file_name(), "saved");
  EXPECT_EQ(e.line_number(), 0);
  EXPECT_EQ(e.field_name(), "a.b");
}

TEST(ConfigReader, LoadReadsFilesAndPicksTheFormat) {
  test::TempDir dir;
  write_file_atomic(dir.file("run.toml"), "steps = 5\n");
  write_file_atomic(dir.file("run.json"), "{\"steps\": 6}");
  EXPECT_EQ(format_of(dir.file("run.toml")), Format::kToml);
  EXPECT_EQ(format_of(dir.file("run.json")), Format::kJson);
  EXPECT_EQ(format_of("run"), Format::kJson);
  const Document toml = Document::load(dir.file("run.toml"), Format::kToml);
  EXPECT_EQ(toml.root().integer("steps"), 5);
  const Document json_file = Document::load(dir.file("run.json"), Format::kJson);
  EXPECT_EQ(json_file.root().integer("steps"), 6);
  const Error missing = caught([&] { Document::load(dir.file("none.json"), Format::kJson); });
  EXPECT_EQ(missing.file_name(), dir.file("none.json"));
  // A JSON file given as TOML is a TOML syntax error, located.
  EXPECT_EQ(caught([&] { Document::load(dir.file("run.json"), Format::kToml); }).line_number(), 1);
}

}  // namespace
}  // namespace trex::config
