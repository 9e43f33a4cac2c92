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
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result RunGenerate(const std::string& args, const std::string& env = "") {
  // A file per call: CTest runs this binary's tests in parallel processes, and a shared name let
  // one test read another's (truncated) stderr.
  static int calls = 0;
  const std::string err_path = ::testing::TempDir() + "generate_test_stderr_" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                               "_" + std::to_string(getpid()) + "_" + std::to_string(++calls) +
                               ".txt";
  const std::string cmd = env + " " + CTXPAR_BIN + " generate " + args + " 2>" + err_path;
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
  const std::string prompts[] = {"The capital of France is",
                                 "def fibonacci(n):", "Once upon a time"};
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
    for (std::string line; std::getline(lines, line);)
      want += std::to_string(i) + "\t" + line + "\n";
    std::string got;
    std::istringstream all_lines(all.out);
    for (std::string line; std::getline(all_lines, line);) {
      if (line.rfind(std::to_string(i) + "\t", 0) == 0) got += line + "\n";
    }
    EXPECT_EQ(got, want) << "prompt " << i;
  }
  std::remove(path.c_str());
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + name + "_" + std::to_string(getpid());
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Windows line ends and a byte order mark are not part of the prompts; a file that cannot be
// read is named with the reason.
TEST(Generate, PromptsFileLinesAreThePromptsWritten) {
  const std::string lf = WriteFile("prompts_lf", "Hello\nWorld\n");
  const Result want = RunGenerate("--max-new-tokens 3 --print-ids --prompts-file " + lf);
  ASSERT_EQ(want.code, 0) << want.err;
  for (const char* bytes : {"Hello\r\nWorld\r\n", "\xEF\xBB\xBFHello\nWorld"}) {
    const std::string path = WriteFile("prompts_other", bytes);
    const Result got = RunGenerate("--max-new-tokens 3 --print-ids --prompts-file " + path);
    EXPECT_EQ(got.code, 0) << got.err;
    EXPECT_EQ(got.out, want.out);
    std::remove(path.c_str());
  }
  const std::string empty = WriteFile("prompts_empty", "");
  const std::pair<std::string, std::string> bad[] = {
      {"/nonexistent/prompts.txt", "No such file or directory"},
      {::testing::TempDir(), "it is a directory"},
      {empty, "it holds no line"}};
  for (const auto& [path, reason] : bad) {
    const Result r = RunGenerate("--prompts-file " + path);
    EXPECT_EQ(r.code, 2) << path;
    EXPECT_NE(r.err.find(reason), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("CTXPAR-ENGINE-012"), std::string::npos) << r.err;
  }
  std::remove(lf.c_str());
  std::remove(empty.c_str());
}

// Every prompt is checked before any runs: a prompt that cannot fit the context stops the command
// with its line named, and the prompts before it print nothing.
TEST(Generate, ABadPromptStopsTheRunBeforeAnyOutput) {
  // The prompts file `name` holding `text` is refused with nothing printed, its error `id` naming
  // the line (`message` follows the file's path).
  auto expect_refused = [](const std::string& name, const std::string& text,
                           const std::string& message, const std::string& id) {
    const std::string path = WriteFile(name, text);
    const Result r = RunGenerate("--max-new-tokens 3 --prompts-file " + path);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("prompt 1 (line 2 of " + path + message), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(id), std::string::npos) << r.err;
    std::remove(path.c_str());
  };
  std::string words;
  for (int i = 0; i < 9000; ++i) words += "word ";
  expect_refused("prompts_mixed", "Hello\n" + words + "\nWorld\n",
                 "): The request needs 9004 tokens", "CTXPAR-ENGINE-005");
  // A blank line is no prompt either, and its line is named too.
  expect_refused("prompts_blank", "Hello\n\nWorld\n", ") encodes to no token", "CTXPAR-ENGINE-011");
}

// --max-queued-requests bounds the queue, not the prompts of a file: they go in as it drains,
// and each prints what it prints without the bound.
TEST(Generate, AQueueBoundDelaysPromptsWithoutLosingAny) {
  const std::string path = WriteFile("prompts_queue", "a\nb\nThe sky is\nOnce upon\ne\n");
  const std::string args = "--max-new-tokens 3 --ignore-eos --print-ids --prompts-file " + path;
  const Result free_run = RunGenerate(args);
  ASSERT_EQ(free_run.code, 0) << free_run.err;
  const Result bounded = RunGenerate("--max-queued-requests 1 --max-running-requests 1 " + args);
  EXPECT_EQ(bounded.code, 0) << bounded.err;
  EXPECT_EQ(bounded.out, free_run.out);
  // The summary counts every token of the five prompts, whichever phase each came in.
  EXPECT_NE(bounded.err.find("; 15 generated in "), std::string::npos) << bounded.err;
  std::remove(path.c_str());
}

// --warmup runs the prompts first, untimed and unprinted, then empties the prefix cache: the
// output is the run's without it, printed once, and the timed run computes the whole prompt
// again (the same prompt run twice in one process finds its pages cached), on one rank and on
// three, whose caches the flush reaches through the next run's first plan.
TEST(Generate, WarmupPrintsOnceAndTheTimedRunRecomputesThePrompt) {
  const std::string prompt =
      "'The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy "
      "is Rome. The capital of Spain is Madrid. The capital of Portugal is'";
  const std::string args = "--max-new-tokens 6 --ignore-eos ";
  const Result plain = RunGenerate(args + prompt);
  ASSERT_EQ(plain.code, 0) << plain.err;
  const std::string path =
      WriteFile("prompts_twice", std::string(prompt.substr(1, prompt.size() - 2)) + "\n" +
                                     prompt.substr(1, prompt.size() - 2) + "\n");
  const Result twice = RunGenerate("--max-running-requests 1 " + args + "--prompts-file " + path);
  ASSERT_EQ(twice.code, 0) << twice.err;
  EXPECT_EQ(twice.err.find("(0 from the prefix cache)"), std::string::npos) << twice.err;
  std::remove(path.c_str());
  std::vector<std::string> layouts = {""};
  if (!std::string(CTXPAR_MPIEXEC).empty())
    layouts.push_back("--tp-size 3 --dcp-size 3 --threads 1 ");
  for (const std::string& layout : layouts) {
    const Result warm = RunGenerate(layout + "--warmup 2 " + args + prompt);
    ASSERT_EQ(warm.code, 0) << layout << "\n" << warm.err;
    EXPECT_EQ(warm.out, plain.out) << layout;
    EXPECT_NE(warm.err.find("(0 from the prefix cache)"), std::string::npos) << warm.err;
  }
  const Result bad = RunGenerate("--warmup -1 " + prompt);
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--warmup"), std::string::npos) << bad.err;
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

// A bf16 KV cache (K and V rounded once, when written, and read back rounded by every later
// token, the chunk's own included) holds the same tokens whichever rank stores them and however
// the prompt is chunked: a prompt prefilled 3 tokens a step, and DCP 3 over tp 3 and tp 9, print
// the single rank's ids.
TEST(Generate, Bf16KvCacheGivesTheSameTokensAcrossLayouts) {
  const std::string args =
      "--input-ids 504,3458,282,4649,314,253,1843 --print-ids --max-new-tokens 16 "
      "--kv-cache-dtype bf16 ";
  const Result one = RunGenerate(args);
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(std::count(one.out.begin(), one.out.end(), ' '), 15) << one.out;
  const Result chunked = RunGenerate(args + "--chunked-prefill-size 3");
  ASSERT_EQ(chunked.code, 0) << chunked.err;
  EXPECT_EQ(chunked.out, one.out);
  if (std::string(CTXPAR_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  for (const char* cfg : {"--tp-size 3 --dcp-size 3 --dcp-comm-backend a2a --threads 1",
                          "--tp-size 9 --dcp-size 3 --threads 1"}) {
    const Result many = RunGenerate(args + cfg);
    ASSERT_EQ(many.code, 0) << cfg << "\n" << many.err;
    EXPECT_EQ(many.out, one.out) << cfg;
  }
}

// --dtype auto (int8 activations on the matrix units, src/compute/linear_int8.h): every output is
// one fixed sequence whatever the batch, so a prompt prefilled 3 tokens a step prints the whole
// prompt's ids, and tp 3 (each rank's rows over the whole input row) the single rank's. The
// matmul data types the CPU engine lacks are refused with their catalog ID.
TEST(Generate, DtypeAutoIsBatchInvariantAndOtherTypesAreRefused) {
  const std::string args =
      "--input-ids 504,3458,282,4649,314,253,1843 --print-ids --max-new-tokens 16 --dtype auto ";
  const Result one = RunGenerate(args);
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(std::count(one.out.begin(), one.out.end(), ' '), 15) << one.out;
  const Result chunked = RunGenerate(args + "--chunked-prefill-size 3");
  ASSERT_EQ(chunked.code, 0) << chunked.err;
  EXPECT_EQ(chunked.out, one.out);
  const Result half = RunGenerate("--dtype half --max-new-tokens 1 " + std::string(kPrompt));
  EXPECT_EQ(half.code, 2);
  EXPECT_NE(half.err.find("CTXPAR-DTYPE-001"), std::string::npos) << half.err;
  if (std::string(CTXPAR_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  const Result tp3 = RunGenerate(args + "--tp-size 3 --threads 1");
  ASSERT_EQ(tp3.code, 0) << tp3.err;
  EXPECT_EQ(tp3.out, one.out);
}

// Speculative decoding over real MPI ranks (Open MPI's shared memory for shm_a2a): a batch of
// prompts, repetitive ones among them, prints the same text with --speculative-algorithm NGRAM as
// without, at tp 3 / dcp 3 with each combine backend and interleave sizes 1 and 16, and the
// drafts were accepted.
TEST(Generate, SpeculativeDecodingPrintsThePlainTextOverMpiRanks) {
  if (std::string(CTXPAR_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  const std::string path = WriteFile(
      "generate_test_spec_prompts",
      "Count: one two three four five six seven eight nine ten one two three four five six\n"
      "List the days of the week: Monday, Tuesday, Wednesday,\n"
      "The capital of France is\n");
  const std::string args = "--max-new-tokens 32 --ignore-eos --threads 1 --prompts-file " + path;
  for (const char* cfg : {"--tp-size 3 --dcp-size 3 --dcp-comm-backend ag_rs",
                          "--tp-size 3 --dcp-size 3 --dcp-comm-backend a2a "
                          "--dcp-kv-cache-interleave-size 16",
                          "--tp-size 3 --dcp-size 3 --dcp-comm-backend shm_a2a"}) {
    const Result plain = RunGenerate(args + " " + cfg);
    ASSERT_EQ(plain.code, 0) << cfg << "\n" << plain.err;
    const Result spec = RunGenerate(args + " " + cfg + " --speculative-algorithm NGRAM");
    ASSERT_EQ(spec.code, 0) << cfg << "\n" << spec.err;
    // Each request's lines, in order (requests finish lines in different orders).
    auto by_request = [](const std::string& out) {
      std::array<std::string, 3> text;
      std::istringstream lines(out);
      for (std::string line; std::getline(lines, line);) {
        if (line.size() >= 2 && line[1] == '\t' && line[0] >= '0' && line[0] <= '2') {
          text[line[0] - '0'] += line.substr(2) + "\n";
        }
      }
      return text;
    };
    EXPECT_EQ(by_request(spec.out), by_request(plain.out)) << cfg;
    EXPECT_FALSE(by_request(plain.out)[0].empty()) << plain.out;
    const std::size_t at = spec.err.find("speculative NGRAM: ");
    ASSERT_NE(at, std::string::npos) << spec.err;
    const std::size_t len = spec.err.find("accept len ", at);
    ASSERT_NE(len, std::string::npos) << spec.err;
    EXPECT_GT(std::stod(spec.err.substr(len + 11)), 1.2) << spec.err;
    EXPECT_EQ(plain.err.find("speculative NGRAM: "), std::string::npos) << plain.err;
  }
  std::remove(path.c_str());
}

// Across nodes the ranks talk over TCP: Open MPI restricted to its TCP transport (no shared
// memory between ranks, as between nodes; CTXPAR_MPIRUN_ARGS reaches the self-launch's mpirun)
// gives the single-rank tokens with ag_rs and a2a.
TEST(Generate, TcpTransportGivesTheSingleRankTokens) {
  if (std::string(CTXPAR_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  const Result one = RunGenerate(std::string("--max-new-tokens 12 ") + kPrompt);
  ASSERT_EQ(one.code, 0) << one.err;
  for (const char* backend : {"ag_rs", "a2a"}) {
    const Result tcp = RunGenerate(std::string("--tp-size 3 --dcp-size 3 --dcp-comm-backend ") +
                                       backend + " --max-new-tokens 12 " + kPrompt,
                                   "CTXPAR_MPIRUN_ARGS='--mca btl tcp,self'");
    ASSERT_EQ(tcp.code, 0) << backend << "\n" << tcp.err;
    EXPECT_EQ(tcp.out, one.out) << backend;
  }
  // The arguments do reach mpirun: a transport that does not exist stops the job.
  const Result bogus =
      RunGenerate(std::string("--tp-size 3 --dcp-size 3 --max-new-tokens 2 ") + kPrompt,
                  "CTXPAR_MPIRUN_ARGS='--mca btl nosuchbtl,self'");
  EXPECT_NE(bogus.code, 0);
}

TEST(Generate, SeededSamplingRepeats) {
  const std::string args = std::string("--temperature 0.9 --top-k 40 --top-p 0.95 --seed 11 ") +
                           "--max-new-tokens 12 " + kPrompt;
  const Result a = RunGenerate(args);
  const Result b = RunGenerate(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

// A raw prompt's control tokens are tokens (as llama-cli and /v1/completions read them): the
// conversation --chat renders, typed out, continues with the same ids; a chat message's
// control-token text stays text, so the same text as the --chat message does not.
TEST(Generate, ARawPromptReadsControlTokensAChatMessageDoesNot) {
  const std::string turns =
      "<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n";
  // The shell's $(...) drops the trailing newline; the one inside the quotes puts it back.
  const std::string raw_prompt = "\"$(printf '%b' '" + turns + "')\n\"";
  const std::string args = "--max-new-tokens 6 --print-ids ";
  const Result chat = RunGenerate(args + "--chat Hi");
  const Result raw = RunGenerate(args + raw_prompt);
  const Result typed = RunGenerate(args + "--chat " + raw_prompt);
  ASSERT_EQ(chat.code, 0) << chat.err;
  ASSERT_EQ(raw.code, 0) << raw.err;
  ASSERT_EQ(typed.code, 0) << typed.err;
  EXPECT_EQ(raw.out, chat.out);
  EXPECT_NE(typed.out, chat.out);
}

// --chat-template FILE replaces the model's template: a ChatML file without SmolLM2's default
// system message renders the turns the raw prompt types out; an unreadable file is refused.
TEST(Generate, ChatTemplateFileReplacesTheModelsTemplate) {
  const std::string file =
      ::testing::TempDir() + "generate_test_chatml_" + std::to_string(getpid()) + ".jinja";
  std::ofstream(file) << "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + "
                         "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
                         "{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const std::string turns = "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n";
  const std::string raw_prompt = "\"$(printf '%b' '" + turns + "')\n\"";
  const std::string args = "--max-new-tokens 6 --print-ids ";
  const Result chat = RunGenerate(args + "--chat-template " + file + " --chat Hi");
  const Result raw = RunGenerate(args + raw_prompt);
  ASSERT_EQ(chat.code, 0) << chat.err;
  ASSERT_EQ(raw.code, 0) << raw.err;
  EXPECT_EQ(chat.out, raw.out);
  const Result absent = RunGenerate(args + "--chat-template " + file + ".absent --chat Hi");
  EXPECT_EQ(absent.code, 2) << absent.err;
  EXPECT_NE(absent.err.find("The chat template file " + file +
                            ".absent (--chat-template) cannot be read: no such file."),
            std::string::npos)
      << absent.err;
  EXPECT_NE(absent.err.find("CTXPAR-CHAT-004"), std::string::npos) << absent.err;
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
  EXPECT_EQ(top_p.err,
            "top_p must be in (0, 1], got 0.\nrun: ctxpar explain CTXPAR-SAMPLING-001\n");
  const Result missing =
      RunGenerate(std::string("--model-path /nonexistent/model.gguf ") + kPrompt);
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.err,
            "Cannot open the model file '/nonexistent/model.gguf': No such file or directory. "
            "Fetch the default model with scripts/fetch-model.sh, or give the path with "
            "--model-path or CTXPAR_MODEL.\nrun: ctxpar explain CTXPAR-GGUF-001\n");
  // A file that is there but corrupt is not sent to fetch it again.
  const std::string corrupt = ::testing::TempDir() + "corrupt_" + std::to_string(getpid());
  std::ofstream(corrupt) << "GGUF";
  const Result bad = RunGenerate("--model-path " + corrupt + " " + kPrompt);
  std::remove(corrupt.c_str());
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "The model file '" + corrupt +
                         "' is not a valid GGUF file: version at offset 4 needs 4 bytes but only "
                         "0 remain (file size 4).\nrun: ctxpar explain CTXPAR-GGUF-002\n");
}

// An unknown option is reported as such, with the way to pass a prompt that starts with '-'
// (it used to say "prompt is required"); a repeated option keeps its last value.
TEST(Generate, SaysWhatIsWrongWithTheCommandLine) {
  const Result x = RunGenerate("-x");
  EXPECT_EQ(x.code, 2);
  EXPECT_EQ(x.err,
            "Unknown option '-x' for ctxpar generate; run: ctxpar generate --help to list the "
            "accepted flags. To pass a prompt that starts with '-', put it after --: ctxpar "
            "generate [flags] -- '-x'\nrun: ctxpar explain CTXPAR-FLAG-009\n");
  const Result x_prompt = RunGenerate(std::string("-x ") + kPrompt);
  EXPECT_EQ(x_prompt.err, x.err);
  const Result missing = RunGenerate("");
  EXPECT_EQ(missing.err,
            "Cannot parse the command line of ctxpar generate: a prompt, --prompts-file or "
            "--input-ids is required\nrun: ctxpar explain CTXPAR-FLAG-005\n");
  const Result dash = RunGenerate("--model-path /nonexistent/m.gguf -- -x");
  EXPECT_NE(dash.err.find("CTXPAR-GGUF-001"), std::string::npos) << dash.err;  // -x was the prompt
  const Result repeated = RunGenerate(
      std::string("--max-new-tokens 1 --max-new-tokens 0 --model-path /nonexistent/m.gguf ") +
      kPrompt);
  EXPECT_EQ(repeated.err,
            "Invalid value '0' for --max-new-tokens: out of range; valid values: integers from 1 "
            "to 2147483647.\nrun: ctxpar explain CTXPAR-FLAG-003\n");
  const Result seed = RunGenerate(std::string("--seed -1 ") + kPrompt);
  EXPECT_EQ(seed.err,
            "Invalid value '-1' for --seed: out of range; valid values: integers from 0 to "
            "18446744073709551615.\nrun: ctxpar explain CTXPAR-FLAG-003\n");
  const Result word_seed = RunGenerate(std::string("--seed one ") + kPrompt);
  EXPECT_NE(word_seed.err.find("CTXPAR-FLAG-002"), std::string::npos) << word_seed.err;
  // --stop and --stop-token-ids take one value each: the prompt after them stays the prompt.
  const Result stops =
      RunGenerate(std::string("--max-new-tokens 2 --stop-token-ids 2 --stop No ") + kPrompt);
  EXPECT_EQ(stops.code, 0) << stops.err;
  const Result chat_ids = RunGenerate("--chat --input-ids 1,2");
  EXPECT_NE(chat_ids.err.find("--chat wraps a text prompt"), std::string::npos) << chat_ids.err;
  // A value of the wrong kind for generate's own options names the launch flags' entries.
  const Result word = RunGenerate(std::string("--max-new-tokens abc ") + kPrompt);
  EXPECT_EQ(word.err,
            "Invalid value 'abc' for --max-new-tokens: not an integer; valid values: "
            "integers.\nrun: ctxpar explain CTXPAR-FLAG-002\n");
  const Result warm = RunGenerate(std::string("--temperature warm ") + kPrompt);
  EXPECT_NE(warm.err.find("Invalid value 'warm' for --temperature: not a number"),
            std::string::npos)
      << warm.err;
  EXPECT_NE(warm.err.find("CTXPAR-FLAG-010"), std::string::npos) << warm.err;
  const Result huge = RunGenerate(std::string("--max-new-tokens 99999999999 ") + kPrompt);
  EXPECT_NE(huge.err.find("out of range"), std::string::npos) << huge.err;
  EXPECT_NE(huge.err.find("CTXPAR-FLAG-003"), std::string::npos) << huge.err;
  // CLI11 reads "-hello" as -h and more short flags: it printed the help and exited 0.
  const Result hello = RunGenerate("-hello");
  EXPECT_EQ(hello.code, 2);
  EXPECT_TRUE(hello.out.empty()) << hello.out;
  EXPECT_NE(hello.err.find("Unknown option '-hello'"), std::string::npos) << hello.err;
  EXPECT_NE(hello.err.find("CTXPAR-FLAG-009"), std::string::npos) << hello.err;
  // Token id lists are read whole: an empty item is not a token (it used to be dropped or 0).
  const Result empty_item = RunGenerate(std::string("--stop-token-ids 1,,2 ") + kPrompt);
  EXPECT_NE(empty_item.err.find("Invalid value '' for --stop-token-ids: not an integer"),
            std::string::npos)
      << empty_item.err;
  const Result no_ids = RunGenerate("--input-ids ''");
  EXPECT_NE(no_ids.err.find("Invalid value '' for --input-ids"), std::string::npos) << no_ids.err;
  for (const char* bad : {"18446744073709551616", "1e23"}) {
    const Result r = RunGenerate(std::string("--seed ") + bad + " " + kPrompt);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--seed"), std::string::npos) << r.err;
  }
}

// --threads is bounded by the machine (it used to hang above it, exhausting the process ids) and
// a count below 1 is refused (-4 used to mean the default; leaving the flag out does).
TEST(Generate, RefusesThreadCountsTheMachineCannotRun) {
  const std::string max = std::to_string(std::max(1u, std::thread::hardware_concurrency()));
  for (const char* threads : {"100000", "2147483647"}) {
    const Result r = RunGenerate(std::string("--threads ") + threads + " " + kPrompt);
    EXPECT_EQ(r.code, 2) << threads;
    EXPECT_EQ(r.err, std::string("Invalid value ") + threads +
                         " for --threads: out of range for this machine, which has " + max +
                         " hardware threads; valid values: integers from 1 to " + max +
                         ".\nrun: ctxpar explain CTXPAR-FLAG-007\n");
    EXPECT_TRUE(r.out.empty());
  }
  for (const char* threads : {"-4", "-1", "0"}) {
    const Result r = RunGenerate(std::string("--threads ") + threads + " " + kPrompt);
    EXPECT_EQ(r.code, 2) << threads;
    EXPECT_EQ(r.err, std::string("Invalid value '") + threads +
                         "' for --threads: out of range; valid values: integers from 1 to "
                         "2147483647.\nrun: ctxpar explain CTXPAR-FLAG-003\n");
  }
}

// A copy of the model ($CTXPAR_MODEL) with `patch` applied to its bytes, in the test's temp
// directory; empty when the model is not there.
std::string PatchedModel(const std::string& name,
                         const std::function<void(std::vector<char>&)>& patch) {
  const char* model = std::getenv("CTXPAR_MODEL");
  if (model == nullptr) return "";
  std::ifstream in(model, std::ios::binary | std::ios::ate);
  std::vector<char> bytes(static_cast<size_t>(in.tellg()));
  in.seekg(0).read(bytes.data(), std::streamsize(bytes.size()));
  patch(bytes);
  const std::string path = ::testing::TempDir() + name + "_" + std::to_string(getpid()) + ".gguf";
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

// The offset of the value of metadata key `key` (after its name and its u32 type).
size_t ValueOffset(const std::vector<char>& bytes, const std::string& key) {
  const auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  return static_cast<size_t>(it - bytes.begin()) + key.size() + 4;
}

// The offset of the data-offset field of a 2-D tensor's info.
size_t TensorOffsetField(const std::vector<char>& bytes, const std::string& name) {
  std::string prefixed(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(prefixed.data(), &len, 8);
  prefixed += name;
  const auto it = std::search(bytes.begin(), bytes.end(), prefixed.begin(), prefixed.end());
  return static_cast<size_t>(it - bytes.begin()) + prefixed.size() + 4 + 2 * 8 + 4;
}

// Numbers that are not numbers, and tensors that share bytes, are refused at load with the
// catalog entry naming the file and the key or tensor (they used to run and print nothing).
TEST(Generate, RefusesModelFilesWithBrokenValues) {
  if (std::getenv("CTXPAR_MODEL") == nullptr) GTEST_SKIP() << "CTXPAR_MODEL is not set";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::string name;
    std::function<void(std::vector<char>&)> patch;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"nan_rope",
       [&](std::vector<char>& b) {
         std::memcpy(&b[ValueOffset(b, "llama.rope.freq_base")], &nan, 4);
       },
       "has llama.rope.freq_base = nan, but it must be a finite number in (1, 1e12].\nrun: "
       "ctxpar explain CTXPAR-GGUF-006\n"},
      {"negative_eps",
       [](std::vector<char>& b) {
         const float eps = -1e-5f;
         std::memcpy(&b[ValueOffset(b, "llama.attention.layer_norm_rms_epsilon")], &eps, 4);
       },
       "has llama.attention.layer_norm_rms_epsilon = -9.999999747378752e-06, but it must be a "
       "finite number in (0, 1).\nrun: ctxpar explain CTXPAR-GGUF-006\n"},
      {"overlap",
       [](std::vector<char>& b) {
         // blk.0.attn_k.weight's data moves onto blk.0.attn_q.weight's.
         std::memcpy(&b[TensorOffsetField(b, "blk.0.attn_k.weight")],
                     &b[TensorOffsetField(b, "blk.0.attn_q.weight")], 8);
       },
       "overlaps tensor"},
  };
  for (const Case& c : cases) {
    const std::string path = PatchedModel(c.name, c.patch);
    const Result r = RunGenerate("--model-path " + path + " --max-new-tokens 4 " + kPrompt);
    std::remove(path.c_str());
    EXPECT_EQ(r.code, 2) << c.name << "\n" << r.err;
    EXPECT_NE(r.err.find("The model file '" + path + "'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

}  // namespace
