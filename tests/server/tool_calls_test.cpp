// Tool calls taken out of a chat completion's text, in the formats the models' own templates ask
// for: Qwen 2.5 / Hermes ("<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>", from the
// Qwen2.5 chat template) and Llama 3.1's JSON calls ({"name": ..., "parameters": ...}, optionally
// after <|python_tag|>, several separated by ";"), Mistral's after its [TOOL_CALLS] token (a JSON
// list, as Mistral's tokenizer documentation and the Mistral Nemo template write them, or
// name[ARGS]{...} per call, the v11 tokenizers'). Text that is not such a call stays content.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <string>

namespace ctxpar::server {
namespace {

using json = nlohmann::ordered_json;

json Function(const json& call) { return call["function"]; }

TEST(ToolCalls, ParserNamesAreSglangs) {
  EXPECT_EQ(ToolCallParserByName(""), ToolCallParser::kNone);
  EXPECT_EQ(ToolCallParserByName("qwen25"), ToolCallParser::kHermes);
  EXPECT_EQ(ToolCallParserByName("qwen"), ToolCallParser::kHermes);
  EXPECT_EQ(ToolCallParserByName("hermes"), ToolCallParser::kHermes);
  EXPECT_EQ(ToolCallParserByName("llama3"), ToolCallParser::kLlama3);
  EXPECT_EQ(ToolCallParserByName("mistral"), ToolCallParser::kMistral);
  EXPECT_EQ(ToolCallParserByName("pythonic"), std::nullopt);
}

TEST(ToolCalls, HermesTakesEachTaggedCallAndKeepsTheRest) {
  const ToolCalls two = ExtractToolCalls(
      ToolCallParser::kHermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"C\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
      "\"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(two.content, "Let me check.");
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[0]["type"], "function");
  EXPECT_EQ(Function(two.calls[0]),
            json({{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\",\"unit\":\"C\"}"}}));
  EXPECT_EQ(Function(two.calls[1]), json({{"name", "get_time"}, {"arguments", "{}"}}));
  EXPECT_NE(two.calls[0]["id"], two.calls[1]["id"]);
  // Arguments already a string pass through as they are.
  const ToolCalls string_args = ExtractToolCalls(
      ToolCallParser::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"x=1\"}</tool_call>");
  ASSERT_EQ(string_args.calls.size(), 1u);
  EXPECT_EQ(Function(string_args.calls[0])["arguments"], "x=1");
  EXPECT_EQ(string_args.content, "");
  // Not a call: broken JSON, no name, an unclosed tag, no tag at all.
  for (const std::string text :
       {"<tool_call>{\"name\": \"f\", </tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
        "a <tool_call>{\"name\": \"f\", \"arguments\": {}}", "Plain {\"name\": \"f\"} text"}) {
    const ToolCalls none = ExtractToolCalls(ToolCallParser::kHermes, text);
    EXPECT_TRUE(none.calls.empty()) << text;
    EXPECT_EQ(none.content, text);
  }
}

TEST(ToolCalls, Llama3TakesJsonCallsAfterThePythonTag) {
  const ToolCalls one = ExtractToolCalls(
      ToolCallParser::kLlama3,
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco\"}}");
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(Function(one.calls[0]),
            json({{"name", "get_weather"}, {"arguments", "{\"city\":\"San Francisco\"}"}}));
  EXPECT_EQ(one.content, "");
  const ToolCalls tagged = ExtractToolCalls(
      ToolCallParser::kLlama3,
      "Sure.<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", "
      "\"arguments\": {}}");
  ASSERT_EQ(tagged.calls.size(), 2u);
  EXPECT_EQ(Function(tagged.calls[0])["name"], "a");
  EXPECT_EQ(Function(tagged.calls[1]), json({{"name", "b"}, {"arguments", "{}"}}));
  EXPECT_EQ(tagged.content, "Sure.");
  for (const std::string text : {"The answer is 4.", "Use {braces} like this.",
                                 "{\"name\": \"a\", \"parameters\": {}}; not json"}) {
    const ToolCalls none = ExtractToolCalls(ToolCallParser::kLlama3, text);
    EXPECT_TRUE(none.calls.empty()) << text;
    EXPECT_EQ(none.content, text);
  }
}

TEST(ToolCalls, MistralTakesTheCallsAfterItsToken) {
  const ToolCalls list = ExtractToolCalls(
      ToolCallParser::kMistral,
      "[TOOL_CALLS] [{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, "
      "France\", \"format\": \"celsius\"}, \"id\": \"a5Bc3dE9f\"}, {\"name\": \"get_time\", "
      "\"arguments\": {}}]");
  ASSERT_EQ(list.calls.size(), 2u);
  EXPECT_EQ(Function(list.calls[0]),
            json({{"name", "get_current_weather"},
                  {"arguments", "{\"location\":\"Paris, France\",\"format\":\"celsius\"}"}}));
  EXPECT_EQ(Function(list.calls[1]), json({{"name", "get_time"}, {"arguments", "{}"}}));
  EXPECT_EQ(list.content, "");
  const ToolCalls v11 = ExtractToolCalls(
      ToolCallParser::kMistral,
      "Checking both.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time"
      "[CALL_ID]x1[ARGS]{}");
  ASSERT_EQ(v11.calls.size(), 2u);
  EXPECT_EQ(Function(v11.calls[0]),
            json({{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}));
  EXPECT_EQ(Function(v11.calls[1]), json({{"name", "get_time"}, {"arguments", "{}"}}));
  EXPECT_EQ(v11.content, "Checking both.");
  // Not a call: no token, broken JSON, an empty list, a name without [ARGS], arguments not JSON.
  for (const std::string text :
       {"Paris is sunny.", "[TOOL_CALLS] [{\"name\": \"f\", ", "[TOOL_CALLS][]",
        "[TOOL_CALLS]get_weather{\"city\": 1}", "[TOOL_CALLS]f[ARGS]city=Paris",
        "[TOOL_CALLS] [{\"arguments\": {}}]"}) {
    const ToolCalls none = ExtractToolCalls(ToolCallParser::kMistral, text);
    EXPECT_TRUE(none.calls.empty()) << text;
    EXPECT_EQ(none.content, text);
  }
}

TEST(ToolCalls, NoParserKeepsTheText) {
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  const ToolCalls none = ExtractToolCalls(ToolCallParser::kNone, text);
  EXPECT_TRUE(none.calls.empty());
  EXPECT_EQ(none.content, text);
}

}  // namespace
}  // namespace ctxpar::server
