#include "models/base/yaml_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace domino {
namespace {

using ::testing::HasSubstr;

enum class Color { kRed, kGreen };
constexpr std::array<std::pair<std::string_view, Color>, 2> kColors{{
    {"red", Color::kRed},
    {"green", Color::kGreen},
}};

YamlMap MapOf(const std::string& text) {
  Result<YAML::Node> node = ParseYaml(text, "t.yaml");
  EXPECT_TRUE(node.ok()) << node.message();
  return YamlMap(*node, "t.yaml");
}

TEST(ParseYaml, SyntaxErrorNamesFileLineAndColumn) {
  Result<YAML::Node> node = ParseYaml("a: 1\nb: [1, 2\n", "s.yaml");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.message(), HasSubstr("s.yaml:3:"));
  EXPECT_THAT(node.message(), HasSubstr("invalid YAML"));
}

// YAML's only control characters are tab, line feed and carriage return: any other is named
// where it is, not misread (yaml-cpp took a NUL for the end of its line).
TEST(ParseYaml, AControlCharacterIsNamedWhereItIs) {
  Result<YAML::Node> nul = ParseYaml(std::string("name: a\nkey: b\0c\n", 17), "c.yaml");
  ASSERT_FALSE(nul.ok());
  EXPECT_THAT(nul.message(), HasSubstr("c.yaml:2:7: invalid YAML: control character \\x00"));
  Result<YAML::Node> del = ParseYaml("a: \x7f\n", "c.yaml");
  ASSERT_FALSE(del.ok());
  EXPECT_THAT(del.message(), HasSubstr("c.yaml:1:4: invalid YAML: control character \\x7f"));
  EXPECT_TRUE(ParseYaml("a:\t1\r\nb: 2\n", "c.yaml").ok());
}

// A name is one line of a table or a header: no control character, though YAML's quotes allow it.
TEST(YamlMap, ANameHoldsNoControlCharacter) {
  std::string name = "kept";
  YamlMap tab = MapOf("name: \"a\\tb\"\n");
  tab.Name("name", &name, Need::kRequired);
  EXPECT_EQ(tab.Finish().message(),
            "t.yaml:1:7: name: must not hold control characters (a newline, a tab)");
  EXPECT_EQ(name, "kept");
  YamlMap plain = MapOf("name: a b\n");
  plain.Name("name", &name, Need::kRequired);
  EXPECT_TRUE(plain.Finish().ok());
  EXPECT_EQ(name, "a b");
}

// A number or a switch written as a string ("4", '4', !!str 4) is text in YAML: refused, not
// converted, whichever way it is quoted.
TEST(YamlMap, QuotedNumbersAndSwitchesAreStrings) {
  for (const char* text : {"n: \"4\"\n", "n: '4'\n", "n: !!str 4\n"}) {
    YamlMap map = MapOf(text);
    int n = 1;
    map.Int("n", &n, Need::kRequired);
    EXPECT_EQ(n, 1) << text;
    Status status = map.Finish();
    ASSERT_FALSE(status.ok()) << text;
    EXPECT_THAT(status.message(), HasSubstr("n: expected an integer, got the string '4'"));
  }
  YamlMap real = MapOf("x: \"0.5\"\n");
  double x = 0;
  real.Real("x", &x, Need::kRequired);
  Status real_status = real.Finish();
  ASSERT_FALSE(real_status.ok());
  EXPECT_THAT(real_status.message(), HasSubstr("x: expected a number, got the string '0.5'"));
  YamlMap flag = MapOf("b: \"false\"\n");
  bool b = true;
  flag.Bool("b", &b, Need::kRequired);
  EXPECT_TRUE(b);
  EXPECT_FALSE(flag.Finish().ok());
  // Plain scalars still read as numbers and switches.
  YamlMap plain = MapOf("n: 4\nx: 0.5\nb: false\n");
  int n = 0;
  plain.Int("n", &n, Need::kRequired);
  plain.Real("x", &x, Need::kRequired);
  plain.Bool("b", &b, Need::kRequired);
  EXPECT_TRUE(plain.Finish().ok());
  EXPECT_EQ(n, 4);
  EXPECT_EQ(x, 0.5);
  EXPECT_FALSE(b);
}

TEST(ParseYaml, AQuoteNeverClosedIsAnErrorWhereItOpens) {
  // yaml-cpp reads the string to the end of the file, the keys after it swallowed.
  for (const char* text : {"a: 1\nname: \"abc\nlayers: 4\n", "a: 1\nname: 'abc\nlayers: 4\n",
                           "a: 1\nname: \"ab\\\"c\nlayers: 4\n", "a: 1\nname: 'it''s\n",
                           // After a tag or an anchor, which may stand on the line before.
                           "a: 1\nname: !!str \"abc\nlayers: 4\n", "a: 1\nname: &x 'abc\n",
                           "a: 1\nname: !!str # c\n  &x\n  \"abc\n"}) {
    Result<YAML::Node> node = ParseYaml(text, "q.yaml");
    ASSERT_FALSE(node.ok()) << text;
    EXPECT_EQ(node.message(),
              "q.yaml:2:7: invalid YAML: a quoted string that is never closed (it runs to the "
              "end of the file)");
  }
  // Closed ones, escapes and doubled single quotes among them, and quoted keys, read as before.
  Result<YAML::Node> closed = ParseYaml(
      "name: \"a\\\"b\"\nb: 'it''s'\n\"k\": \"multi\n  line\"\nc: [\"x\", 'y']\n", "q.yaml");
  ASSERT_TRUE(closed.ok()) << closed.message();
  EXPECT_EQ((*closed)["name"].as<std::string>(), "a\"b");
  EXPECT_EQ((*closed)["b"].as<std::string>(), "it's");
  EXPECT_EQ((*closed)["k"].as<std::string>(), "multi line");
  EXPECT_EQ((*closed)["c"][1].as<std::string>(), "y");
  // After a UTF-8 byte order mark, with Windows line ends, quotes in comments and non-ASCII text.
  Result<YAML::Node> marked =
      ParseYaml("\xEF\xBB\xBF# a \"quote\r\nname: \"m\xC3\xA9\" # it's\r\nlayers: 4\r\n", "q.yaml");
  ASSERT_TRUE(marked.ok()) << marked.message();
  EXPECT_EQ((*marked)["layers"].as<int>(), 4);
  Result<YAML::Node> open = ParseYaml(
      "\xEF\xBB\xBF"
      "a: 1\r\nname: \"abc\r\nb: 2\r\n",
      "q.yaml");
  ASSERT_FALSE(open.ok());
  EXPECT_THAT(open.message(), HasSubstr("q.yaml:2:7: invalid YAML: a quoted string that is never"));
}

TEST(ParseYaml, TooManyEmptyDocumentsAreAnError) {
  // The documents are walked up to 63: the 64th is refused, and what follows it not left unread.
  std::string text = "a: 1\n";
  for (int i = 0; i < 62; ++i) text += "---\n";
  EXPECT_TRUE(ParseYaml(text, "d.yaml").ok());
  Result<YAML::Node> past = ParseYaml(text + "---\nb: 2\n", "d.yaml");
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.message(),
            "d.yaml:64:1: invalid YAML: document 64 ('---'); a domino file holds one");
}

TEST(ParseYaml, ASecondDocumentIsAnErrorNotIgnored) {
  Result<YAML::Node> node = ParseYaml("a: 1\n---\nb: 2\n", "two.yaml");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.message(), HasSubstr("two.yaml:2:1: invalid YAML: a second document"));
  // An empty trailing document holds nothing that could be lost.
  Result<YAML::Node> trailing = ParseYaml("---\na: 1\n---\n", "one.yaml");
  ASSERT_TRUE(trailing.ok()) << trailing.message();
  EXPECT_EQ((*trailing)["a"].as<int>(), 1);
  Result<YAML::Node> empty = ParseYaml("", "empty.yaml");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->IsNull());
}

// yaml-cpp keeps a merge key as a key named "<<" (the keys it stands for then read as missing):
// one is refused where it stands, in a block or a flow mapping, at any depth. A quoted "<<" is a
// plain string, "<<" as a value is no key, and anchors and aliases without a merge still read.
TEST(ParseYaml, AMergeKeyIsAnErrorWhereItStands) {
  Result<YAML::Node> block =
      ParseYaml("base: &b {tp: 8}\nparallel:\n  dp: 1\n  <<: *b\n", "m.yaml");
  ASSERT_FALSE(block.ok());
  EXPECT_EQ(block.message(),
            "m.yaml:4:3: <<: YAML merge keys are not supported; write the keys out");
  Result<YAML::Node> flow = ParseYaml("a:\n  - [1, {x: 1, <<: {y: 2}}]\n", "f.yaml");
  ASSERT_FALSE(flow.ok());
  EXPECT_THAT(flow.message(), HasSubstr("f.yaml:2:16: <<: YAML merge keys"));
  Result<YAML::Node> top = ParseYaml("<<: {a: 1}\n", "t.yaml");
  ASSERT_FALSE(top.ok());
  EXPECT_THAT(top.message(), HasSubstr("t.yaml:1:1: <<:"));
  for (const char* fine : {"\"<<\": 1\n", "'<<': 1\n", "!!str <<: 1\n", "a: <<\n", "a: [<<, <<]\n",
                           "? a\n: <<\nb: {c: <<}\n", "a: &x {b: 1}\nc: *x\nd: [*x, ~, {}]\n"}) {
    Result<YAML::Node> node = ParseYaml(fine, "ok.yaml");
    EXPECT_TRUE(node.ok()) << fine << ": " << node.message();
  }
}

TEST(YamlMap, ReadsEveryType) {
  YamlMap map = MapOf("n: 7\nx: 2.5\nflag: false\ns: hello\ncolor: green\n");
  int n = 0;
  double x = 0;
  bool flag = true;
  std::string s;
  Color color = Color::kRed;
  map.Int("n", &n, Need::kRequired);
  map.Real("x", &x, Need::kRequired);
  map.Bool("flag", &flag, Need::kRequired);
  map.String("s", &s, Need::kRequired);
  map.Enum<Color>("color", &color, Need::kRequired, kColors);
  ASSERT_TRUE(map.Finish().ok());
  EXPECT_EQ(n, 7);
  EXPECT_DOUBLE_EQ(x, 2.5);
  EXPECT_FALSE(flag);
  EXPECT_EQ(s, "hello");
  EXPECT_EQ(color, Color::kGreen);
}

TEST(YamlMap, OptionalKeysLeaveDefaults) {
  YamlMap map = MapOf("a: 1\n");
  int a = 0;
  int64_t b = 42;
  double c = 1.5;
  map.Int("a", &a, Need::kRequired);
  map.Int("b", &b, Need::kOptional);
  map.Real("c", &c, Need::kOptional);
  ASSERT_TRUE(map.Finish().ok());
  EXPECT_EQ(b, 42);
  EXPECT_DOUBLE_EQ(c, 1.5);
  EXPECT_TRUE(map.Has("a"));
  EXPECT_FALSE(map.Has("b"));
}

TEST(YamlMap, RealRanges) {
  double x = 0;
  YamlMap zero = MapOf("x: 0\n");
  zero.Real("x", &x, Need::kRequired);  // > 0 by default
  EXPECT_THAT(zero.Finish().message(), HasSubstr("t.yaml:1:4: x: must be greater than 0, got 0"));

  YamlMap inclusive = MapOf("x: 0\n");
  inclusive.Real("x", &x, Need::kRequired, RealRange{.min = 0, .max = 1, .min_exclusive = false});
  EXPECT_TRUE(inclusive.Finish().ok());

  YamlMap above = MapOf("x: 1.5\n");
  above.Real("x", &x, Need::kRequired, RealRange{.min = 0, .max = 1, .min_exclusive = false});
  EXPECT_THAT(above.Finish().message(), HasSubstr("at most 1, got 1.5"));

  for (const char* bad : {"x: nan\n", "x: inf\n", "x: .inf\n", "x: 1e999\n", "x: 3 GB\n"}) {
    YamlMap map = MapOf(bad);
    map.Real("x", &x, Need::kRequired);
    EXPECT_THAT(map.Finish().message(), HasSubstr("expected a finite number")) << bad;
  }
}

TEST(YamlMap, IntRanges) {
  int64_t v = 0;
  YamlMap map = MapOf("v: 11\n");
  map.Int("v", &v, Need::kRequired, IntRange{.min = 0, .max = 10});
  EXPECT_THAT(map.Finish().message(), HasSubstr("v: must be between 0 and 10, got 11"));
  EXPECT_EQ(v, 0);  // untouched on error

  YamlMap plus = MapOf("v: +5\n");
  plus.Int("v", &v, Need::kRequired);
  EXPECT_TRUE(plus.Finish().ok());
  EXPECT_EQ(v, 5);

  int narrow = 0;
  YamlMap wide = MapOf("v: 3000000000\n");
  wide.Int("v", &narrow, Need::kRequired);
  EXPECT_THAT(wide.Finish().message(), HasSubstr("must be between 1 and 2147483647"));
}

TEST(YamlMap, Bool) {
  bool b = false;
  YamlMap ok = MapOf("b: True\n");
  ok.Bool("b", &b, Need::kRequired);
  EXPECT_TRUE(ok.Finish().ok());
  EXPECT_TRUE(b);
  YamlMap bad = MapOf("b: 1\n");
  bad.Bool("b", &b, Need::kRequired);
  EXPECT_THAT(bad.Finish().message(), HasSubstr("t.yaml:1:4: b: expected true or false, got '1'"));
}

TEST(YamlMap, Enum) {
  Color color = Color::kRed;
  YamlMap map = MapOf("\ncolor: blue\n");
  map.Enum<Color>("color", &color, Need::kRequired, kColors);
  EXPECT_THAT(map.Finish().message(),
              HasSubstr("t.yaml:2:8: color: unknown value 'blue' (expected red | green)"));
  EXPECT_EQ(color, Color::kRed);
}

TEST(YamlMap, NestedMapsNameTheKeyPath) {
  YamlMap map = MapOf("model: x\ntraining:\n  seq_len: -4\n  micro_batch: 2\n");
  std::string model;
  map.String("model", &model, Need::kRequired);
  std::optional<YamlMap> training = map.Map("training", Need::kRequired);
  ASSERT_TRUE(training.has_value());
  int seq_len = 0, micro_batch = 0;
  training->Int("seq_len", &seq_len, Need::kRequired);
  training->Int("micro_batch", &micro_batch, Need::kRequired);
  EXPECT_TRUE(map.failed());  // the child shares its parent's error
  EXPECT_THAT(map.Finish().message(),
              HasSubstr("t.yaml:3:12: training.seq_len: must be a positive integer, got -4"));
}

TEST(YamlMap, NestedUnknownKeyAndWrongShape) {
  YamlMap map = MapOf("training:\n  seq_lne: 4\n");
  std::optional<YamlMap> training = map.Map("training", Need::kRequired);
  ASSERT_TRUE(training.has_value());
  int seq_len = 0;
  training->Int("seq_len", &seq_len, Need::kOptional);
  EXPECT_THAT(training->Finish().message(),
              HasSubstr("t.yaml:2:3: training.seq_lne: unknown key (did you mean 'seq_len'?)"));

  YamlMap scalar = MapOf("training: 3\n");
  EXPECT_FALSE(scalar.Map("training", Need::kRequired).has_value());
  EXPECT_THAT(scalar.Finish().message(), HasSubstr("training: expected a mapping"));
}

TEST(YamlMap, MisspelledRequiredKeyIsReportedAsTheTypo) {
  YamlMap map = MapOf("name: x\nhiden: 8\n");
  std::string name;
  int hidden = 0;
  map.String("name", &name, Need::kRequired);
  map.Int("hidden", &hidden, Need::kRequired);
  EXPECT_THAT(map.Finish().message(),
              HasSubstr("t.yaml:2:1: hiden: unknown key (did you mean 'hidden'?)"));

  YamlMap unrelated = MapOf("name: x\nzzz: 8\n");
  unrelated.String("name", &name, Need::kRequired);
  unrelated.Int("hidden", &hidden, Need::kRequired);
  EXPECT_THAT(unrelated.Finish().message(), HasSubstr("t.yaml:1:1: hidden: missing required key"));
}

TEST(YamlMap, DuplicateKeyAndNullValue) {
  int a = 0;
  YamlMap dup = MapOf("a: 1\nb: 2\na: 3\n");
  dup.Int("a", &a, Need::kRequired);
  dup.Int("b", &a, Need::kRequired);
  EXPECT_THAT(dup.Finish().message(), HasSubstr("t.yaml:3:1: a: duplicate key"));

  YamlMap null = MapOf("a: ~\n");
  null.Int("a", &a, Need::kOptional);
  EXPECT_THAT(null.Finish().message(), HasSubstr("a: has no value"));
}

TEST(YamlMap, FailKeepsTheFirstErrorAndPointsAtTheKey) {
  YamlMap map = MapOf("a: 1\nb: 2\n");
  int a = 0, b = 0;
  map.Int("a", &a, Need::kRequired);
  map.Int("b", &b, Need::kRequired);
  map.Fail("b", "b must exceed a");
  map.Fail("a", "second error");
  EXPECT_EQ(map.Finish().message(), "t.yaml:2:4: b: b must exceed a");
}

TEST(YamlMap, NonMappingDocument) {
  YamlMap map = MapOf("- 1\n- 2\n");
  EXPECT_TRUE(map.failed());
  EXPECT_THAT(map.Finish().message(), HasSubstr("t.yaml:1:1: the document: expected a mapping"));
}

TEST(NearestWord, SuggestsOnlyPlausibleTypos) {
  const std::vector<std::string> keys = {"hidden", "heads", "kv_heads", "layers", "seq_len"};
  EXPECT_EQ(NearestWord("hiden", keys), "hidden");
  EXPECT_EQ(NearestWord("head", keys), "heads");
  EXPECT_EQ(NearestWord("kvheads", keys), "kv_heads");
  EXPECT_EQ(NearestWord("layer", keys), "layers");
  EXPECT_EQ(NearestWord("colour", keys), "");
  EXPECT_EQ(NearestWord("x", std::vector<std::string>{}), "");
}

}  // namespace
}  // namespace domino
