// The error catalog: complete entries, every ID the code can raise is there, rendering with
// Python formatting, and matching pasted messages back to their entries.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ctxpar/error_catalog.h"

namespace ctxpar {
namespace {

// The IDs fixed by the project (issue 2); others use them, so none may disappear.
const char* const kFixedIds[] = {
    "CTXPAR-DCP-001",    "CTXPAR-DCP-002",    "CTXPAR-DCP-003",  "CTXPAR-DCP-004",
    "CTXPAR-DCP-005",    "CTXPAR-DCP-006",    "CTXPAR-DCP-007",  "CTXPAR-LAYOUT-001",
    "CTXPAR-LAYOUT-002", "CTXPAR-LAYOUT-003", "CTXPAR-CP-001",   "CTXPAR-CP-002",
    "CTXPAR-DSV4-001",   "CTXPAR-DSV4-002",   "CTXPAR-DSV4-003", "CTXPAR-DSV4-004",
    "CTXPAR-MOE-001",    "CTXPAR-FLAG-001",
};

void ExpectComplete(const CatalogEntry& e) {
  SCOPED_TRACE(std::string(e.id));
  EXPECT_TRUE(std::regex_match(std::string(e.id), std::regex("CTXPAR-[A-Z0-9]+-[0-9]{3}")));
  EXPECT_FALSE(e.title.empty());
  EXPECT_FALSE(e.message_template.empty());
  EXPECT_GT(e.meaning.size(), 40u);
  EXPECT_GT(e.when.size(), 40u);
  EXPECT_FALSE(e.solutions.empty());
  for (std::string_view s : e.solutions) EXPECT_FALSE(s.empty());
  EXPECT_NE(e.before, e.after);
  for (std::string_view cmd : {e.before, e.after}) {
    EXPECT_TRUE(cmd.starts_with("ctxpar ") || cmd.starts_with("mpiexec ")) << cmd;
    EXPECT_NE(cmd.find("ctxpar "), std::string_view::npos) << cmd;
  }
  EXPECT_FALSE(e.related.empty());
  for (std::string_view r : e.related) {
    EXPECT_NE(r, e.id);
    EXPECT_NE(FindCatalogEntry(r), nullptr) << r;
  }
  EXPECT_NE(e.code, StatusCode::kOk);
}

TEST(CatalogTest, EveryEntryIsCompleteAndIdsAreUniqueAndSorted) {
  std::set<std::string_view> seen;
  std::string_view previous;
  for (const CatalogEntry& e : ErrorCatalog()) {
    ExpectComplete(e);
    EXPECT_TRUE(seen.insert(e.id).second) << e.id;
    EXPECT_LT(previous, e.id);
    previous = e.id;
  }
  for (const char* id : kFixedIds) EXPECT_NE(FindCatalogEntry(id), nullptr) << id;
}

// Every ID written anywhere in the sources (a rule, a runtime check, a CLI) has an entry.
TEST(CatalogTest, EveryIdInTheSourcesHasAnEntry) {
  const std::regex id_re("CTXPAR-[A-Z0-9]+-[0-9]{3}");
  std::set<std::string> found;
  for (const char* dir : {"src", "cli", "include"}) {
    std::filesystem::path root = std::filesystem::path(CTXPAR_SOURCE_DIR) / dir;
    if (!std::filesystem::exists(root)) continue;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      for (auto it = std::sregex_iterator(s.begin(), s.end(), id_re); it != std::sregex_iterator();
           ++it) {
        found.insert(it->str());
      }
    }
  }
  EXPECT_GT(found.size(), 20u);  // the scan did see the rules
  for (const std::string& id : found) EXPECT_NE(FindCatalogEntry(id), nullptr) << id;
}

TEST(CatalogTest, RendersTemplatesWithNamedValues) {
  Status s = CatalogError("CTXPAR-LAYOUT-001", {{"tp_size", "6"}, {"dcp_size", "4"}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.error_id(), "CTXPAR-LAYOUT-001");
  EXPECT_EQ(s.message(), "tp_size (6) must be divisible by dcp_size (4).");
  EXPECT_EQ(CatalogError("CTXPAR-DCP-007",
                         {{"rank", "2"}, {"host", "'a'"}, {"peer", "3"}, {"peer_host", "'b'"}})
                .code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(CatalogError("ctxpar-dcp-004", {}).error_id(), "CTXPAR-DCP-004");
}

TEST(CatalogTest, RenderingSlipsAreInternalErrors) {
  EXPECT_EQ(CatalogError("CTXPAR-NOPE-001", {}).code(), StatusCode::kInternal);
  EXPECT_EQ(CatalogError("CTXPAR-LAYOUT-001", {{"tp_size", "6"}}).message(),
            "CatalogError: CTXPAR-LAYOUT-001 needs a value for {dcp_size}");
  EXPECT_EQ(CatalogError("CTXPAR-DCP-004", {{"dcp_size", "1"}}).message(),
            "CatalogError: CTXPAR-DCP-004 has no placeholder {dcp_size}");
}

TEST(CatalogTest, PlaceholdersInOrderWithoutRepeats) {
  EXPECT_EQ(TemplatePlaceholders("{source} declared {field}={value}, but {field} holds {type}."),
            (std::vector<std::string>{"source", "field", "value", "type"}));
  EXPECT_EQ(TemplatePlaceholders("DeepSeekV4 CP supports moe_a2a_backend in "
                                 "{supported_a2a_backends}, got {moe_a2a_backend}."),
            (std::vector<std::string>{"supported_a2a_backends", "moe_a2a_backend"}));
}

// explain --message finds every template with values filled in, and recovers the values.
TEST(CatalogTest, MatchesEveryRenderedTemplate) {
  for (const CatalogEntry& e : ErrorCatalog()) {
    SCOPED_TRACE(std::string(e.id));
    std::vector<std::string> names = TemplatePlaceholders(e.message_template);
    std::vector<CatalogArg> args;
    for (const std::string& n : names) args.push_back({n, "'" + n + " sample'"});
    Status rendered = CatalogError(e.id, std::span<const CatalogArg>(args));
    ASSERT_EQ(rendered.error_id(), e.id) << rendered.message();
    std::optional<CatalogMatch> m = MatchCatalogMessage(rendered.message());
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->entry->id, e.id);
    for (const auto& [name, value] : m->values) EXPECT_EQ(value, "'" + name + " sample'");
  }
}

TEST(CatalogTest, MatchesTheThreeSeedMessagesAsSglangPrintsThem) {
  EXPECT_EQ(MatchCatalogMessage(
                "--dcp-comm-backend fi_a2a delegates the exchange to FlashInfer's MNNVL All-to-All "
                "kernel, which requires an NVIDIA CUDA platform with SM90+ and MNNVL fabric memory "
                "(e.g. GB200 NVL72). The authoritative fabric probe runs at model-runner init; use "
                "'a2a' or 'ag_rs' on clusters without MNNVL.")
                ->entry->id,
            "CTXPAR-DCP-003");
  // SGLang's source shows the f-string, braces and all.
  EXPECT_EQ(MatchCatalogMessage("--dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP "
                                "communication backend (it removes the head-dim Q all-gather); "
                                "got --dcp-comm-backend={cfg.dcp_comm_backend}.")
                ->entry->id,
            "CTXPAR-DCP-005");
  EXPECT_EQ(MatchCatalogMessage("DeepSeekV4 CP supports moe_a2a_backend in "
                                "{supported_a2a_backends}, got {cfg.moe_a2a_backend!r}.")
                ->entry->id,
            "CTXPAR-DSV4-004");
  std::optional<CatalogMatch> m = MatchCatalogMessage(
      "DeepSeekV4 CP supports moe_a2a_backend in ('none', 'deepep', 'megamoe', 'mori'), got "
      "'flashinfer'.");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->entry->id, "CTXPAR-DSV4-004");
  ASSERT_EQ(m->values.size(), 2u);
  EXPECT_EQ(m->values[0].second, "('none', 'deepep', 'megamoe', 'mori')");
  EXPECT_EQ(m->values[1].second, "'flashinfer'");
  // A placeholder used three times ({command} in FLAG-009) is one value.
  m = MatchCatalogMessage(
      "Unknown option '-hx' for ctxpar explain; run: ctxpar explain --help to list the accepted "
      "flags. To pass a catalog-id that starts with '-', put it after --: ctxpar explain [flags] "
      "-- '-hx'");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->entry->id, "CTXPAR-FLAG-009");
  const std::vector<std::pair<std::string, std::string>> want = {
      {"argument", "'-hx'"}, {"command", "explain"}, {"positional", "catalog-id"}};
  EXPECT_EQ(m->values, want);
}

TEST(CatalogTest, MatchesWrappedAndPrefixedPastes) {
  EXPECT_EQ(MatchCatalogMessage("ValueError: --dcp-replicate-q-proj requires\n  --dcp-size > 1.\n")
                ->entry->id,
            "CTXPAR-DCP-004");
  EXPECT_EQ(MatchCatalogMessage("  tp_size (6) must be divisible by dcp_size (4).  ")->entry->id,
            "CTXPAR-LAYOUT-001");
  // The more specific template wins when a looser one also matches.
  EXPECT_EQ(
      MatchCatalogMessage(
          "Invalid value 'x' for --tp-size / --tensor-parallel-size: not an integer; valid values: "
          "integers from 1 to 2147483647.")
          ->entry->id,
      "CTXPAR-FLAG-002");
  EXPECT_FALSE(MatchCatalogMessage("segmentation fault (core dumped)").has_value());
  EXPECT_FALSE(MatchCatalogMessage("").has_value());
}

// The matcher answers in linear time: a megabyte of text (random bytes, repeated template text,
// a rendered template buried in it) takes well under a second, where a backtracking regex took
// seconds for 16 KB and overflowed its stack near 50 KB.
double SecondsToMatch(const std::string& text, std::optional<CatalogMatch>* out) {
  const auto t0 = std::chrono::steady_clock::now();
  *out = MatchCatalogMessage(text);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(CatalogTest, MatchesMegabyteInputsInUnderASecond) {
  ASSERT_EQ(kMaxCatalogMessageBytes, size_t{1} << 20);
  std::mt19937 rng(42);
  std::string random_bytes(kMaxCatalogMessageBytes, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng());
  std::string literal_runs;
  while (literal_runs.size() + 64 < kMaxCatalogMessageBytes) {
    literal_runs += "tp_size (6) must be divisible by ";  // a template's prefix, never completed
  }
  const std::string buried = std::string(kMaxCatalogMessageBytes / 2, 'x') +
                             " tp_size (6) must be divisible by dcp_size (4). " +
                             std::string(kMaxCatalogMessageBytes / 2 - 64, 'y');
  const std::string blanks(kMaxCatalogMessageBytes, ' ');
  for (const std::string* text :
       std::initializer_list<const std::string*>{&random_bytes, &literal_runs, &buried, &blanks}) {
    ASSERT_LE(text->size(), kMaxCatalogMessageBytes);
    std::optional<CatalogMatch> m;
    EXPECT_LT(SecondsToMatch(*text, &m), 1.0);
    if (text == &buried) {
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->entry->id, "CTXPAR-LAYOUT-001");
      EXPECT_EQ(m->values, (std::vector<std::pair<std::string, std::string>>{{"tp_size", "6"},
                                                                             {"dcp_size", "4"}}));
    }
  }
  // One byte past the limit is not matched, even though the message is in it.
  std::string over = buried + std::string(kMaxCatalogMessageBytes - buried.size() + 1, ' ');
  std::optional<CatalogMatch> m;
  EXPECT_LT(SecondsToMatch(over, &m), 1.0);
  EXPECT_FALSE(m.has_value());
}

// Every template rendered with long values, alone and inside a megabyte of other text.
TEST(CatalogTest, MatchesEveryTemplateRenderedWithLongValues) {
  for (const CatalogEntry& e : ErrorCatalog()) {
    SCOPED_TRACE(std::string(e.id));
    const std::vector<std::string> names = TemplatePlaceholders(e.message_template);
    std::vector<CatalogArg> args;
    for (const std::string& n : names) args.push_back({n, n + std::string(20000, 'v')});
    const std::string rendered = CatalogError(e.id, std::span<const CatalogArg>(args)).message();
    std::optional<CatalogMatch> m;
    EXPECT_LT(SecondsToMatch(rendered, &m), 1.0);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->entry->id, e.id);
    for (const auto& [name, value] : m->values) EXPECT_EQ(value, name + std::string(20000, 'v'));
    const std::string padding((kMaxCatalogMessageBytes - rendered.size()) / 2 - 1, 'z');
    EXPECT_LT(SecondsToMatch(padding + " " + rendered + " " + padding, &m), 1.0);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->entry->id, e.id);
  }
}

// A placeholder takes the shortest text that lets the rest match, as the documented lazy
// semantics say: the first " holds " after "but " ends {field}.
TEST(CatalogTest, PlaceholdersTakeTheShortestText) {
  std::optional<CatalogMatch> m =
      MatchCatalogMessage("h declared tp_size=x holds y, but tp_size holds int holds z.");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->entry->id, "CTXPAR-CONFIG-002");
  EXPECT_EQ(
      m->values,
      (std::vector<std::pair<std::string, std::string>>{
          {"source", "h"}, {"field", "tp_size"}, {"value", "x holds y"}, {"type", "int holds z"}}));
}

TEST(PythonFormat, ReprAndTuple) {
  EXPECT_EQ(PyRepr("flashinfer"), "'flashinfer'");
  EXPECT_EQ(PyRepr(""), "''");
  EXPECT_EQ(PyRepr("it's"), "\"it's\"");
  EXPECT_EQ(PyRepr("say \"hi\""), "'say \"hi\"'");
  EXPECT_EQ(PyRepr("it's \"x\""), "'it\\'s \"x\"'");
  EXPECT_EQ(PyRepr("a\\b"), "'a\\\\b'");
  EXPECT_EQ(PyRepr("a\nb\tc\r"), "'a\\nb\\tc\\r'");
  EXPECT_EQ(PyRepr(std::string("\x01\x7f", 2)), "'\\x01\\x7f'");
  EXPECT_EQ(PyRepr("h\xc3\xa9"), "'h\xc3\xa9'");  // printable non-ASCII stays as it is
  const std::string_view four[] = {"none", "deepep", "megamoe", "mori"};
  EXPECT_EQ(PyTuple(four), "('none', 'deepep', 'megamoe', 'mori')");
  const std::string_view one[] = {"none"};
  EXPECT_EQ(PyTuple(one), "('none',)");
  EXPECT_EQ(PyTuple({}), "()");
}

}  // namespace
}  // namespace ctxpar
