// `ctxpar explain`: by ID, from a pasted message, --json, and the failures (exit 2).
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_ctxpar.h"

namespace ctxpar {
namespace {

using nlohmann::json;
using testing::RunCtxpar;

TEST(CliExplain, ById) {
  testing::RunResult r = RunCtxpar({"explain", "CTXPAR-DCP-003"});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("CTXPAR-DCP-003: fi_a2a on a platform that is not CUDA\n"));
  for (const char* section : {"\nError message\n", "\nWhat it means\n", "\nWhen it happens\n",
                              "\nSolutions\n  1. ", "\nExample fix\n  # before\n  ctxpar check ",
                              "  # after\n  ctxpar check ", "\nRelated errors\n  CTXPAR-DCP-006"}) {
    EXPECT_NE(r.out.find(section), std::string::npos) << section;
  }
  EXPECT_EQ(RunCtxpar({"explain", "ctxpar-dcp-003"}).out, r.out);  // case-insensitive
}

TEST(CliExplain, ByIdJson) {
  testing::RunResult r = RunCtxpar({"explain", "CTXPAR-LAYOUT-001", "--json"});
  EXPECT_EQ(r.exit_status, 0);
  json j = json::parse(r.out);
  EXPECT_EQ(j["id"], "CTXPAR-LAYOUT-001");
  EXPECT_EQ(j["message_template"],
            "tp_size ({tp_size}) must be divisible by dcp_size ({dcp_size}).");
  EXPECT_EQ(j["example_fix"]["before"], "ctxpar check --tp-size 6 --dcp-size 4");
  EXPECT_EQ(j["example_fix"]["after"], "ctxpar check --tp-size 8 --dcp-size 4");
  for (const char* key : {"title", "meaning", "when"}) EXPECT_TRUE(j[key].is_string()) << key;
  EXPECT_TRUE(j["solutions"].is_array() && !j["solutions"].empty());
  EXPECT_TRUE(j["related"].is_array() && !j["related"].empty());
}

// The example fixes are real: `before` fails with this entry's ID and `after` passes.
TEST(CliExplain, ExampleFixesOfCheckErrorsBehaveAsTheySay) {
  for (const char* id :
       {"CTXPAR-DCP-001",    "CTXPAR-DCP-002",    "CTXPAR-DCP-003",  "CTXPAR-DCP-004",
        "CTXPAR-DCP-005",    "CTXPAR-DCP-006",    "CTXPAR-CP-001",   "CTXPAR-CP-002",
        "CTXPAR-LAYOUT-001", "CTXPAR-LAYOUT-002", "CTXPAR-DSV4-001", "CTXPAR-DSV4-002",
        "CTXPAR-DSV4-003",   "CTXPAR-DSV4-004",   "CTXPAR-FLAG-001", "CTXPAR-FLAG-002",
        "CTXPAR-FLAG-003",   "CTXPAR-FLAG-004",   "CTXPAR-FLAG-005", "CTXPAR-FLAG-006",
        "CTXPAR-MOE-001",    "CTXPAR-SPEC-001",   "CTXPAR-SPEC-002", "CTXPAR-SPEC-003",
        "CTXPAR-SPEC-004",   "CTXPAR-SPEC-005"}) {
    SCOPED_TRACE(id);
    json entry = json::parse(RunCtxpar({"explain", id, "--json"}).out);
    for (const char* which : {"before", "after"}) {
      std::istringstream words(entry["example_fix"][which].get<std::string>());
      std::vector<std::string> argv;
      for (std::string w; words >> w;) argv.push_back(w);
      ASSERT_GE(argv.size(), 2u);
      ASSERT_EQ(argv[0], "ctxpar");
      ASSERT_EQ(argv[1], "check");
      argv.erase(argv.begin());
      argv.insert(argv.begin() + 1, "--json");
      testing::RunResult r = RunCtxpar(argv);
      json out = json::parse(r.out, nullptr, false);
      if (std::string(which) == "before") {
        EXPECT_EQ(r.exit_status, 2);
        EXPECT_EQ(out["error"]["id"], std::string(id)) << r.out;
      } else {
        EXPECT_EQ(r.exit_status, 0) << r.out;
      }
    }
  }
}

TEST(CliExplain, ByMessageFindsTheThreeSeedMessages) {
  const std::pair<const char*, const char*> seeds[] = {
      {"--dcp-comm-backend fi_a2a delegates the exchange to FlashInfer's MNNVL All-to-All "
       "kernel, which requires an NVIDIA CUDA platform with SM90+ and MNNVL fabric memory (e.g. "
       "GB200 NVL72). The authoritative fabric probe runs at model-runner init; use 'a2a' or "
       "'ag_rs' on clusters without MNNVL.",
       "CTXPAR-DCP-003"},
      {"--dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP communication backend (it "
       "removes the head-dim Q all-gather); got --dcp-comm-backend=ag_rs.",
       "CTXPAR-DCP-005"},
      {"DeepSeekV4 CP supports moe_a2a_backend in ('none', 'deepep', 'megamoe', 'mori'), got "
       "'flashinfer'.",
       "CTXPAR-DSV4-004"},
  };
  for (const auto& [message, id] : seeds) {
    testing::RunResult r = RunCtxpar({"explain", "--message", message, "--json"});
    EXPECT_EQ(r.exit_status, 0) << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(j["id"], id);
    EXPECT_TRUE(j["matched_values"].is_object());
    testing::RunResult text = RunCtxpar({"explain", "--message", message});
    EXPECT_EQ(text.exit_status, 0);
    EXPECT_TRUE(text.out.starts_with(std::string(id) + ": ")) << text.out;
  }
  json j = json::parse(
      RunCtxpar({"explain", "--message",
                 "--dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP communication "
                 "backend (it removes the head-dim Q all-gather); got --dcp-comm-backend=ag_rs.",
                 "--json"})
          .out);
  EXPECT_EQ(j["matched_values"], json::parse(R"({"backend": "ag_rs"})"));
}

TEST(CliExplain, FailuresExit2WithAHint) {
  testing::RunResult unknown = RunCtxpar({"explain", "CTXPAR-DCP-999"});
  EXPECT_EQ(unknown.exit_status, 2);
  EXPECT_EQ(unknown.err,
            "ctxpar explain: no catalog entry CTXPAR-DCP-999; IDs look like CTXPAR-DCP-003, run: "
            "ctxpar explain --list\n");
  testing::RunResult unmatched = RunCtxpar({"explain", "--message", "out of memory"});
  EXPECT_EQ(unmatched.exit_status, 2);
  EXPECT_EQ(unmatched.err,
            "ctxpar explain: no catalog entry matches this message; paste the whole error text, "
            "or run: ctxpar explain --list\n");
  EXPECT_EQ(RunCtxpar({"explain"}).exit_status, 2);
  EXPECT_EQ(RunCtxpar({"explain", "CTXPAR-DCP-001", "--message", "x"}).exit_status, 2);
  EXPECT_EQ(RunCtxpar({"explain", "--bogus"}).exit_status, 2);
  EXPECT_EQ(RunCtxpar({"explain", "--help"}).exit_status, 0);
}

// Any message is answered within a second: a megabyte through stdin, random bytes, and the
// longest argument the kernel passes (a backtracking regex took 10 s for 16 KB and crashed near
// 50 KB). Past kMaxCatalogMessageBytes the message is refused with its catalog entry.
TEST(CliExplain, AnswersAnyMessageWithinASecond) {
  using Clock = std::chrono::steady_clock;
  auto timed = [](const std::vector<std::string>& args, const std::optional<std::string>& input) {
    const auto t0 = Clock::now();
    testing::RunResult r = RunCtxpar(args, {}, input);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
    EXPECT_EQ(r.signal, 0);
    return r;
  };
  const size_t limit = size_t{1} << 20;
  const std::string error = "tp_size (6) must be divisible by dcp_size (4).";
  std::string log = "ctxpar generate: " + error + "\n";
  log.resize(limit, '.');
  testing::RunResult found = timed({"explain", "--message", "-", "--json"}, log);
  EXPECT_EQ(found.exit_status, 0) << found.err;
  EXPECT_EQ(json::parse(found.out)["id"], "CTXPAR-LAYOUT-001");

  testing::RunResult over = timed({"explain", "--message", "-", "--json"}, log + ".");
  EXPECT_EQ(over.exit_status, 2);
  EXPECT_EQ(json::parse(over.out)["error_id"], "CTXPAR-EXPLAIN-001");
  EXPECT_NE(over.err.find("longer than 1048576 bytes"), std::string::npos) << over.err;
  EXPECT_NE(over.err.find("run: ctxpar explain CTXPAR-EXPLAIN-001"), std::string::npos);

  std::mt19937 rng(7);
  std::string random_bytes(limit, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng());
  EXPECT_EQ(timed({"explain", "--message", "-"}, random_bytes).exit_status, 2);
  std::string argument(128 * 1024 - 1, 'x');  // MAX_ARG_STRLEN less the terminating NUL
  for (char& c : argument) c = static_cast<char>(1 + rng() % 255);
  EXPECT_EQ(timed({"explain", "--message", argument}, std::nullopt).exit_status, 2);
}

// --json answers in JSON whatever happens, so that a script can always parse stdout.
TEST(CliExplain, JsonAlsoWhenNothingMatches) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"explain", "--message", "out of memory", "--json"},
        std::vector<std::string>{"explain", "CTXPAR-DCP-999", "--json"}}) {
    testing::RunResult r = RunCtxpar(args);
    EXPECT_EQ(r.exit_status, 2);
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["matched"], false);
    EXPECT_TRUE(j["error"].is_string());
  }
}

// A repeated option keeps its last value, as argparse does, in every command.
TEST(CliExplain, RepeatedOptionKeepsTheLastValue) {
  testing::RunResult r = RunCtxpar({"explain", "--message", "out of memory", "--message",
                                    "tp_size (6) must be divisible by dcp_size (4).", "--json"});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["id"], "CTXPAR-LAYOUT-001");
}

// docs/errors.md is the generated catalog; regenerate it with `ctxpar explain --markdown`.
TEST(CliExplain, ErrorsPageIsTheCatalog) {
  testing::RunResult r = RunCtxpar({"explain", "--markdown"});
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(testing::ReadAll(CTXPAR_SOURCE_DIR "/docs/errors.md"), r.out)
      << "run: ctxpar explain --markdown > docs/errors.md";
  EXPECT_NE(r.out.find("\n## CTXPAR-DSV4-004\n"), std::string::npos);
}

TEST(CliExplain, ListsTheCatalog) {
  testing::RunResult r = RunCtxpar({"explain", "--list", "--json"});
  EXPECT_EQ(r.exit_status, 0);
  json j = json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  EXPECT_GE(j.size(), 25u);
  for (size_t i = 1; i < j.size(); ++i) {  // the catalog is ordered by ID
    EXPECT_LT(j[i - 1]["id"].get<std::string>(), j[i]["id"].get<std::string>());
  }
}

}  // namespace
}  // namespace ctxpar
