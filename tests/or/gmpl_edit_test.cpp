#include "trex/or/dataset/gmpl_edit.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trex/core/strings.hpp"
#include "trex/or/families/gmpl_writer.hpp"

namespace trex::orlib {
namespace {

// Every kind, laid out as models from outside may be (comments with ';' and
// ':=' in them, statements over several lines, several on one line).
const std::string kData =
    "set I := a b c; # the items; not a statement := here\n"
    "param K := 7.5;\n"
    "param w :=\n  a 1\n  b 2.5\n  c -3;\n"
    "param t : x y :=\n  a 1 2\n  b 3 4;  param s := a 1 b two;\n"
    "param cap :=\n  [a,b] 5\n  [b,c] 6;\n"
    "set P := (a,b) (b,c);\n"
    "param u (tr) : a b := x 1 2;\n";

TEST(GmplData, ParseReadsEveryKindAndWhereEachValueStands) {
  const std::vector<DataStatement> s = parse_data_section(kData);
  ASSERT_EQ(s.size(), 8u);
  EXPECT_EQ(s[0].kind, DataStatement::set);
  EXPECT_EQ(s[0].raw, "set I := a b c");
  EXPECT_EQ(s[1].kind, DataStatement::scalar);
  EXPECT_EQ(s[1].values, (std::vector<std::string>{"7.5"}));
  EXPECT_EQ(s[2].kind, DataStatement::vector);
  EXPECT_EQ(s[2].keys, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(s[2].values, (std::vector<std::string>{"1", "2.5", "-3"}));
  EXPECT_EQ(s[3].kind, DataStatement::table);
  EXPECT_EQ(s[3].keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s[3].cols, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(s[3].values, (std::vector<std::string>{"1", "2", "3", "4"}));
  EXPECT_EQ(s[4].kind, DataStatement::other);  // a symbolic value
  EXPECT_EQ(s[4].raw, "param s := a 1 b two");
  EXPECT_TRUE(s[4].values.empty());
  EXPECT_EQ(s[5].kind, DataStatement::sparse);
  EXPECT_EQ(s[5].keys, (std::vector<std::string>{"a,b", "b,c"}));
  EXPECT_EQ(s[5].values, (std::vector<std::string>{"5", "6"}));
  EXPECT_EQ(s[6].kind, DataStatement::set);
  EXPECT_EQ(s[7].kind, DataStatement::other);  // `(tr)` is kept as written
  for (const auto& st : s) {
    ASSERT_EQ(st.value_offsets.size(), st.values.size());
    for (size_t k = 0; k < st.values.size(); ++k)
      EXPECT_EQ(kData.substr(st.value_offsets[k], st.values[k].size()), st.values[k]) << st.raw;
  }
  EXPECT_EQ(statement_tokens("param t : x y:=a 1"),
            (std::vector<std::string>{"param", "t", ":", "x", "y", ":=", "a", "1"}));
}

TEST(GmplData, RenderWritesTablesByRowOrByColumn) {
  std::vector<DataStatement> s = parse_data_section(kData);
  EXPECT_EQ(render(s[1]), "param K := 7.5;\n");
  EXPECT_EQ(render(s[2]), "param w := a 1 b 2.5 c -3;\n");
  EXPECT_EQ(render(s[3]), "param t : x y :=\na 1 2\nb 3 4;\n");
  s[3].transposed = true;
  EXPECT_EQ(render(s[3]), "param t (tr) : a b :=\nx 1 3\ny 2 4;\n");
  EXPECT_EQ(written_values(s[3]), (std::vector<std::string>{"1", "3", "2", "4"}));
  EXPECT_EQ(render(s[5]), "param cap := [a,b] 5 [b,c] 6;\n");  // as written
  double v = 0;
  EXPECT_TRUE(parse_number("-2.5e3", v));
  EXPECT_EQ(v, -2500.0);
  EXPECT_FALSE(parse_number("inf", v));
  EXPECT_FALSE(parse_number("3x", v));
}

TEST(GmplData, DataValuesPointAtTheNumbersOfAFamilyModel) {
  GmplData data;
  data.set("I", {"a", "b"})
      .param("K", 4)
      .param("w", {"a", "b"}, {1.5, 2})
      .param("t", {"a", "b"}, {"x", "y"}, {{1, 2}, {3, 4}})
      .param_sparse("cap", {{{"a", "b"}, 5}})
      .raw("param start := a;");
  const std::string gmpl =
      compose_gmpl("set I;\nparam K;\nvar z >= 0;\nmaximize obj: z;\ns.t. c: z <= K;", "obj", data);
  const std::vector<DataValue> values = data_values(gmpl);
  std::vector<std::string> described;
  for (const auto& v : values) described.push_back(describe(v) + "=" + format_number(v.value));
  EXPECT_EQ(described,
            (std::vector<std::string>{"K=4", "w[a]=1.5", "w[b]=2", "t[a,x]=1", "t[a,y]=2",
                                      "t[b,x]=3", "t[b,y]=4", "cap[a,b]=5"}));
  const std::vector<std::string> lines = split(gmpl, '\n');
  for (const auto& v : values)
    EXPECT_EQ(std::stod(lines[v.line].substr(v.pos, v.len)), v.value) << describe(v);
  const std::string changed = with_data_value(gmpl, values[4], 20);
  EXPECT_EQ(data_values(changed)[4].value, 20);
  EXPECT_NE(changed.find("  a 1 20"), std::string::npos);
}

}  // namespace
}  // namespace trex::orlib
