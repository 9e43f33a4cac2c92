// `ctxpar generate` end to end: the binary self-launches three MPI ranks for --tp-size 3
// --dcp-size 3, prints what one rank prints, starts like llama.cpp's greedy continuation, and
// refuses bad launch configurations with the catalog's texts before any rank starts.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result RunGenerate(const std::string& args) {
  // A file per call: CTest runs this binary's tests in parallel processes, and a shared name let
  // one test read another's (truncated) stderr.
  static int calls = 0;
  const std::string err_path = ::testing::TempDir() + "generate_test_stderr_" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                               "_" + std::to_string(getpid()) + "_" + std::to_string(++calls) +
                               ".txt";
  const std::string cmd = std::string(CTXPAR_BIN) + " generate " + args + " 2>" + err_path;
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  in.close();
  std::remove(err_path.c_str());
  return r;
}

const char* kPrompt = "'The capital of France is'";
// llama.cpp's greedy continuation of that prompt (golden.json, plain_france), up to where its
// own top-2 margin drops under its rounding noise (llama_golden_test.cpp).
const char* kLlamaCppStart = " Paris.\n\nThe";

TEST(Generate, ThreeMpiRanksWithDcpPrintTheSingleRankText) {
  if (std::string(CTXPAR_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  const Result one = RunGenerate(std::string("--max-new-tokens 24 ") + kPrompt);
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(one.out.rfind(kLlamaCppStart, 0), 0u) << one.out;
  EXPECT_NE(one.err.find("prefill 5 tokens"), std::string::npos) << one.err;
  EXPECT_NE(one.err.find("tokens/s"), std::string::npos) << one.err;
  for (const char* cfg : {"--tp-size 3 --dcp-size 3 --dcp-comm-backend a2a --dcp-replicate-q-proj",
                          "--tp-size 3 --dcp-size 3 --dcp-comm-backend shm_a2a"}) {
    const Result three = RunGenerate(std::string(cfg) + " --max-new-tokens 24 " + kPrompt);
    ASSERT_EQ(three.code, 0) << cfg << "\n" << three.err;
    EXPECT_EQ(three.out, one.out) << cfg;
    EXPECT_NE(three.err.find("tp 3 dcp 3"), std::string::npos) << three.err;
  }
}

// Every line of a prompts file is a request; they run together (continuous batching) and each
// prints, line by line behind its index and a tab, the text it prints alone.
TEST(Generate, PromptsFileRunsEveryLineAsItRunsAlone) {
  const std::string prompts[] = {"The capital of France is", "def fibonacci(n):",
                                 "Once upon a time"};
  const std::string path = ::testing::TempDir() + "generate_test_prompts.txt";
  {
    std::ofstream f(path);
    for (const std::string& p : prompts) f << p << "\n";
  }
  const Result all = RunGenerate("--max-new-tokens 12 --prompts-file " + path);
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.err.find("3 request(s)"), std::string::npos) << all.err;
  for (int i = 0; i < 3; ++i) {
    const Result one = RunGenerate("--max-new-tokens 12 '" + prompts[i] + "'");
    ASSERT_EQ(one.code, 0) << one.err;
    std::string want;  // the single run's text, each line behind "i\t"
    std::istringstream lines(one.out);
    for (std::string line; std::getline(lines, line);) want += std::to_string(i) + "\t" + line + "\n";
    std::string got;
    std::istringstream all_lines(all.out);
    for (std::string line; std::getline(all_lines, line);) {
      if (line.rfind(std::to_string(i) + "\t", 0) == 0) got += line + "\n";
    }
    EXPECT_EQ(got, want) << "prompt " << i;
  }
  std::remove(path.c_str());
}

// Token ids in and out, for models without a tokenizer; tp 9 with DCP 3 (SmolLM2's 3 KV heads,
// each sharded over a DCP group of 3) and tp 3 with DCP 3 print the ids of one rank.
TEST(Generate, InputIdsPrintIdsAcrossLayouts) {
  const std::string args = "--input-ids 504,3458,282,4649,314 --print-ids --max-new-tokens 8 ";
  const Result one = RunGenerate(args);
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(std::count(one.out.begin(), one.out.end(), ' '), 7) << one.out;
  if (std::string(CTXPAR_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  for (const char* cfg : {"--tp-size 9 --dcp-size 3 --threads 1",
                          "--tp-size 3 --dcp-size 3 --dcp-comm-backend a2a --threads 1"}) {
    const Result many = RunGenerate(args + cfg);
    ASSERT_EQ(many.code, 0) << cfg << "\n" << many.err;
    EXPECT_EQ(many.out, one.out) << cfg;
  }
  const Result bad = RunGenerate("--input-ids 1,x,3");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("'x'"), std::string::npos) << bad.err;
  const Result outside = RunGenerate("--input-ids 1,49152");
  EXPECT_EQ(outside.code, 2);
  // After the engine's start-up lines (the KV capacity), the error and its catalog ID.
  const std::string want =
      "prompt token 1 is 49152, outside the vocabulary [0, 49152).\nrun: ctxpar explain "
      "CTXPAR-ENGINE-010\n";
  ASSERT_GE(outside.err.size(), want.size()) << outside.err;
  EXPECT_EQ(outside.err.substr(outside.err.size() - want.size()), want);
}

TEST(Generate, SeededSamplingRepeats) {
  const std::string args = std::string("--temperature 0.9 --top-k 40 --top-p 0.95 --seed 11 ") +
                           "--max-new-tokens 12 " + kPrompt;
  const Result a = RunGenerate(args);
  const Result b = RunGenerate(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(Generate, RefusesBadLaunchConfigurationsWithCatalogTexts) {
  const Result heads = RunGenerate(std::string("--tp-size 2 --dcp-size 2 ") + kPrompt);
  EXPECT_EQ(heads.code, 2);
  EXPECT_EQ(heads.err,
            "num_heads (9) must be divisible by dcp_size (2)\nrun: ctxpar explain "
            "CTXPAR-LAYOUT-003\n");
  EXPECT_TRUE(heads.out.empty());
  const Result fi =
      RunGenerate(std::string("--tp-size 3 --dcp-size 3 --dcp-comm-backend fi_a2a ") + kPrompt);
  EXPECT_EQ(fi.code, 2);
  EXPECT_EQ(fi.err,
            "--dcp-comm-backend fi_a2a delegates the exchange to FlashInfer's MNNVL All-to-All "
            "kernel, which requires an NVIDIA CUDA platform with SM90+ and MNNVL fabric memory "
            "(e.g. GB200 NVL72). The authoritative fabric probe runs at model-runner init; use "
            "'a2a' or 'ag_rs' on clusters without MNNVL.\nrun: ctxpar explain CTXPAR-DCP-003\n");
  const Result top_p = RunGenerate(std::string("--temperature 1 --top-p 0 ") + kPrompt);
  EXPECT_EQ(top_p.code, 2);
  EXPECT_EQ(top_p.err, "top_p must be in (0, 1], got 0.\nrun: ctxpar explain CTXPAR-SAMPLING-001\n");
  const Result missing =
      RunGenerate(std::string("--model-path /nonexistent/model.gguf ") + kPrompt);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("/nonexistent/model.gguf"), std::string::npos) << missing.err;
}

}  // namespace
