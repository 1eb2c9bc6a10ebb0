// The lenient JSONL reader: bad lines are skipped and counted, lone surrogate
// escapes and invalid UTF-8 are repaired to U+FFFD, strict mode stops at the
// first bad line with file:line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"

namespace trex {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(JsonlRepair, LoneSurrogatesBecomeReplacementEscapes) {
  long n = -1;
  EXPECT_EQ(repair_json_text(R"({"a": "x\udcffy"})", &n), R"({"a": "x\ufffdy"})");
  EXPECT_EQ(n, 1);
  // A lone high surrogate, at the end of the string and before a non-low escape.
  EXPECT_EQ(repair_json_text(R"("\ud800")", &n), R"("\ufffd")");
  EXPECT_EQ(n, 1);
  EXPECT_EQ(repair_json_text(R"("\uD83D\u0041")", &n), R"("\ufffd\u0041")");
  EXPECT_EQ(n, 1);
  // A valid pair is kept; two low surrogates are two replacements.
  EXPECT_EQ(repair_json_text(R"("\ud83d\ude00")", &n), R"("\ud83d\ude00")");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(repair_json_text(R"("\udc00\udfff")", &n), R"("\ufffd\ufffd")");
  EXPECT_EQ(n, 2);
  // An escaped backslash followed by "udcff" is text, not an escape.
  EXPECT_EQ(repair_json_text(R"("\\udcff")", &n), R"("\\udcff")");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(repair_json_text(R"("\\\udcff")", &n), R"("\\\ufffd")");
  EXPECT_EQ(n, 1);
}

TEST(JsonlRepair, InvalidUtf8IsReplacedByMaximalSubparts) {
  long n = -1;
  // Valid multi-byte text is untouched.
  const std::string ok = "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"";
  EXPECT_EQ(repair_json_text(ok, &n), ok);
  EXPECT_EQ(n, 0);
  // A lone continuation byte, an invalid lead, a truncated 3-byte sequence
  // (one replacement for E2 82, as Python's decoder), an overlong C0 80 (two).
  EXPECT_EQ(repair_json_text("\"a\x80"
                             "b\"",
                             &n),
            "\"a" + kFffd + "b\"");
  EXPECT_EQ(n, 1);
  EXPECT_EQ(repair_json_text("\"\xFF\"", &n), "\"" + kFffd + "\"");
  EXPECT_EQ(n, 1);
  EXPECT_EQ(repair_json_text("\"\xE2\x82z\"", &n), "\"" + kFffd + "z\"");
  EXPECT_EQ(n, 1);
  EXPECT_EQ(repair_json_text("\"\xC0\x80\"", &n), "\"" + kFffd + kFffd + "\"");
  EXPECT_EQ(n, 2);
  // UTF-8-encoded surrogates (ED A0 80) are ill-formed: three replacements.
  EXPECT_EQ(repair_json_text("\"\xED\xA0\x80\"", &n), "\"" + kFffd + kFffd + kFffd + "\"");
  EXPECT_EQ(n, 3);
  // A truncated sequence at the very end.
  EXPECT_EQ(repair_json_text("\"\xF0\x9F", &n), "\"" + kFffd);
  EXPECT_EQ(n, 1);
}

TEST(JsonlLine, StatusesAndValues) {
  JsonlLine blank = parse_jsonl_line("  \t\r");
  EXPECT_EQ(blank.status, JsonlLine::Status::blank);

  JsonlLine ok = parse_jsonl_line(R"({"a": 1})");
  ASSERT_EQ(ok.status, JsonlLine::Status::ok);
  EXPECT_EQ(ok.value["a"], 1);
  EXPECT_EQ(ok.replacements, 0);

  JsonlLine crlf = parse_jsonl_line("{\"a\": 2}\r");
  ASSERT_EQ(crlf.status, JsonlLine::Status::ok);
  EXPECT_EQ(crlf.value["a"], 2);

  JsonlLine sur = parse_jsonl_line(R"({"t": "x\udcffy"})");
  ASSERT_EQ(sur.status, JsonlLine::Status::repaired);
  EXPECT_EQ(sur.replacements, 1);
  EXPECT_EQ(sur.value["t"].get<std::string>(), "x" + kFffd + "y");

  JsonlLine raw = parse_jsonl_line(
      "{\"t\": \"a\xFF\xFE"
      "b\"}");
  ASSERT_EQ(raw.status, JsonlLine::Status::repaired);
  EXPECT_EQ(raw.replacements, 2);
  EXPECT_EQ(raw.value["t"].get<std::string>(), "a" + kFffd + kFffd + "b");

  JsonlLine truncated = parse_jsonl_line(R"({"id": 1, "completion": "abc)");
  EXPECT_EQ(truncated.status, JsonlLine::Status::invalid);
  EXPECT_TRUE(truncated.value.is_null());
  EXPECT_NE(truncated.error.find("invalid JSON"), std::string::npos) << truncated.error;

  // A truncated line that also has a surrogate: still invalid after repair.
  EXPECT_EQ(parse_jsonl_line(R"({"t": "\udcff)").status, JsonlLine::Status::invalid);

  // Binary: NUL bytes and random bytes, and the error text stays printable ASCII.
  std::string blob("\x00\x01\xFF\x7F{\"\x00\x9C", 9);
  JsonlLine bin = parse_jsonl_line(blob);
  EXPECT_EQ(bin.status, JsonlLine::Status::invalid);
  for (char c : bin.error)
    EXPECT_TRUE(c >= 0x20 && c < 0x7F) << "non-printable byte in " << bin.error;
  EXPECT_LE(bin.error.size(), 300u);

  // Deep nesting is refused before the parser (and callers) recurse into it.
  EXPECT_EQ(parse_jsonl_line(std::string(100000, '[') + std::string(100000, ']')).status,
            JsonlLine::Status::invalid);
  EXPECT_EQ(parse_jsonl_line(std::string(500, '[') + std::string(500, ']')).status,
            JsonlLine::Status::ok);
  // Brackets inside strings do not count.
  EXPECT_EQ(parse_jsonl_line("\"" + std::string(5000, '[') + "\"").status, JsonlLine::Status::ok);
}

TEST(JsonlLenient, SkipsCountsAndRepairs) {
  test::TempDir dir;
  const std::string path = dir.file("mixed.jsonl");
  std::string text;
  text += "{\"n\": 1, \"t\": \"good\"}\n";                // 1 good
  text += "{\"n\": 2, \"t\": \"x\\udcffy\"}\n";           // 2 repaired (escape)
  text += "{\"n\": 3, \"t\": \"\xC3\x28\"}\n";            // 3 repaired (raw bytes)
  text += "{\"n\": 4, \"t\": \"trunc\n";                  // 4 truncated
  text += "\n";                                           // 5 blank
  text += std::string("\x00\x01\x02\xFF\xFE", 5) + "\n";  // 6 binary
  text += "{\"n\": \"seven\"}\n";                         // 7 rejected by the callback
  text += "{\"n\": 8, \"t\": \"last\"}";                  // 8 good, no final newline
  write_raw(path, text);

  std::vector<long> seen_lines;
  std::vector<std::string> texts;
  auto fn = [&](const json& r, long line) {
    if (!r.at("n").is_number_integer()) throw Error("n is not an integer").field("n");
    seen_lines.push_back(line);
    texts.push_back(r.value("t", ""));
  };
  JsonlStats s = read_jsonl(path, JsonlOptions{}, fn);
  EXPECT_EQ(seen_lines, (std::vector<long>{1, 2, 3, 8}));
  EXPECT_EQ(texts[1], "x" + kFffd + "y");
  EXPECT_EQ(texts[2], kFffd + "(");
  EXPECT_EQ(s.path, path);
  EXPECT_EQ(s.lines, 7);
  EXPECT_EQ(s.records, 4);
  EXPECT_EQ(s.skipped, 3);
  EXPECT_EQ(s.repaired, 2);
  EXPECT_EQ(s.replacements, 2);
  ASSERT_EQ(s.skips.size(), 3u);
  EXPECT_EQ(s.skips[0].line, 4);
  EXPECT_NE(s.skips[0].reason.find("invalid JSON"), std::string::npos);
  EXPECT_EQ(s.skips[1].line, 6);
  EXPECT_EQ(s.skips[2].line, 7);
  EXPECT_EQ(s.skips[2].reason, "field 'n': n is not an integer");
  EXPECT_FALSE(s.clean());

  const json j = s.to_json();
  EXPECT_EQ(j["records"], 4);
  EXPECT_EQ(j["skipped"], 3);
  EXPECT_EQ(j["repaired"], 2);
  ASSERT_EQ(j["skipped_lines"].size(), 3u);
  EXPECT_EQ(j["skipped_lines"][1]["line"], 6);
  const std::string summary = s.summary();
  EXPECT_NE(summary.find("4 records, 3 lines skipped (line 4:"), std::string::npos) << summary;
  EXPECT_NE(summary.find("2 repaired"), std::string::npos) << summary;

  // A nlohmann exception from the callback (wrong type) is a skipped record too.
  JsonlStats typed = read_jsonl(path, JsonlOptions{},
                                [](const json& r, long) { (void)r.at("t").get<std::string>(); });
  EXPECT_EQ(typed.records, 4);  // lines 1, 2, 3, 8; line 7 has no "t"
  EXPECT_EQ(typed.skipped, 3);
  EXPECT_EQ(typed.skips.back().line, 7);
  EXPECT_NE(typed.skips.back().reason.find("bad record"), std::string::npos);

  // Strict: the first bad line throws with file:line.
  JsonlOptions strict = strict_jsonl();
  seen_lines.clear();
  try {
    read_jsonl(path, strict, fn);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.line_number(), 4);
    EXPECT_NE(std::string(e.what()).find("mixed.jsonl:4"), std::string::npos) << e.what();
  }
  EXPECT_EQ(seen_lines, (std::vector<long>{1, 2, 3}));  // repairs are accepted in strict mode

  // Strict and a callback error: the callback's message with file:line added.
  write_raw(dir.file("typed.jsonl"), "{\"n\": 1}\n{\"n\": \"x\"}\n");
  try {
    read_jsonl(dir.file("typed.jsonl"), strict, fn);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.line_number(), 2);
    EXPECT_EQ(e.field_name(), "n");
    EXPECT_NE(std::string(e.what()).find("typed.jsonl:2"), std::string::npos) << e.what();
  }

  // The first max_reported skips are kept, all are counted.
  JsonlOptions few;
  few.max_reported = 1;
  JsonlStats f = read_jsonl(path, few, fn);
  EXPECT_EQ(f.skipped, 3);
  EXPECT_EQ(f.skips.size(), 1u);

  EXPECT_THROW(read_jsonl(dir.file("missing.jsonl"), JsonlOptions{}, fn), Error);
}

TEST(JsonlLenient, IndexCountsSkippedLines) {
  test::TempDir dir;
  write_raw(dir.file("i.jsonl"), "{\"a\": 0}\n\n{broken\n{\"a\": 2}\n");
  std::vector<std::pair<long, long>> seen;
  JsonlStats s = read_jsonl_indexed(
      dir.file("i.jsonl"), JsonlOptions{},
      [&](const json&, long line, long index) { seen.emplace_back(line, index); });
  EXPECT_EQ(seen, (std::vector<std::pair<long, long>>{{1, 0}, {4, 2}}));
  EXPECT_EQ(s.skipped, 1);
}

TEST(JsonlLenient, LongLinesParseAndOverlongLinesAreSkipped) {
  test::TempDir dir;
  const std::string path = dir.file("long.jsonl");
  const size_t big = size_t(50) << 20;  // a 50 MiB string field, read across many blocks
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"i\": 0}\n{\"i\": 1, \"t\": \"";
    const std::string chunk(1 << 20, 'x');
    for (size_t k = 0; k < big / chunk.size(); ++k) out << chunk;
    out << "\"}\n{\"i\": 2}\n";
  }
  std::vector<size_t> sizes;
  JsonlStats s = read_jsonl(path, JsonlOptions{}, [&](const json& r, long) {
    sizes.push_back(r.value("t", std::string()).size());
  });
  EXPECT_EQ(s.records, 3);
  EXPECT_EQ(s.skipped, 0);
  ASSERT_EQ(sizes.size(), 3u);
  EXPECT_EQ(sizes[1], big);

  JsonlOptions small;
  small.max_line_bytes = 1 << 20;
  std::vector<long> lines;
  JsonlStats t = read_jsonl(path, small, [&](const json&, long line) { lines.push_back(line); });
  EXPECT_EQ(lines, (std::vector<long>{1, 3}));
  EXPECT_EQ(t.skipped, 1);
  ASSERT_EQ(t.skips.size(), 1u);
  EXPECT_EQ(t.skips[0].line, 2);
  EXPECT_NE(t.skips[0].reason.find("longer than"), std::string::npos);
  small.strict = true;
  EXPECT_THROW(read_jsonl(path, small, [](const json&, long) {}), Error);
}

TEST(JsonlLenient, MergeKeepsFileNames) {
  JsonlStats a;
  a.path = "a.jsonl";
  a.records = 2;
  JsonlStats b;
  b.path = "b.jsonl";
  b.records = 1;
  b.skipped = 1;
  b.repaired = 1;
  b.replacements = 3;
  b.skips.push_back({7, "invalid JSON"});
  a.merge(b);
  EXPECT_EQ(a.records, 3);
  EXPECT_EQ(a.skipped, 1);
  EXPECT_EQ(a.replacements, 3);
  ASSERT_EQ(a.skips.size(), 1u);
  EXPECT_EQ(a.skips[0].line, 7);
  EXPECT_EQ(a.skips[0].reason, "b.jsonl: invalid JSON");
}

}  // namespace
}  // namespace trex
