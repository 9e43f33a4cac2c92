// `ctxpar tokenize` end to end: llama.cpp's own test pairs (the vocabulary-only GGUFs of the
// llama-cpp-python sdist, at CTXPAR_LLAMA_SDIST) through stdin and stdout, and its refusals.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_ctxpar.h"
#include "text/byte_level.h"
#include "text/gguf_image.h"

namespace ctxpar {
namespace {

using testing::RunCtxpar;

std::string ModelsDir() {
  const char* sdist = std::getenv("CTXPAR_LLAMA_SDIST");
  if (sdist == nullptr || *sdist == '\0') return "";
  const std::string dir = std::string(sdist) + "/vendor/llama.cpp/models";
  return std::filesystem::is_directory(dir) ? dir : "";
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<int32_t> Ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

// Every input of a vocabulary's .inp, one JSON string a line, gives the .out line's ids.
void ExpectPairsPass(const std::string& vocab) {
  const std::string path = ModelsDir() + "/ggml-vocab-" + vocab + ".gguf";
  const std::string raw = testing::ReadAll(path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::string input;
  size_t count = 0;
  for (size_t pos = 0; pos < raw.size(); ++count) {  // test-tokenizer-0's reading
    const size_t next = std::min(raw.find(sep, pos), raw.size());
    input += nlohmann::json(raw.substr(pos, next - pos)).dump() + "\n";
    pos = next + sep.size();
  }
  const std::vector<std::string> expected = Lines(testing::ReadAll(path + ".out"));
  ASSERT_EQ(expected.size(), count) << path;
  const auto r = RunCtxpar({"tokenize", "--model-path", path}, {}, input);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  const std::vector<std::string> got = Lines(r.out);
  ASSERT_EQ(got.size(), count) << r.out;
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ(nlohmann::json::parse(got[i]).get<std::vector<int32_t>>(), Ids(expected[i]))
        << vocab << " input " << i;
  }
}

TEST(Tokenize, PrintsLlamaCppsIdsForItsTestPairs) {
  if (ModelsDir().empty()) {
    GTEST_SKIP() << "needs the llama-cpp-python sdist: set CTXPAR_LLAMA_SDIST to the path that "
                    "scripts/fetch-llama-sdist.sh prints (scripts/test.sh does)";
  }
  ExpectPairsPass("llama-bpe");
  ExpectPairsPass("phi-3");
}

// A vocabulary-only file of the 256 byte-level tokens and "ab".
std::string TinyVocabFile() {
  TokenizerSpec spec;
  testing::AddByteLevelTokens(spec);
  spec.tokens.push_back("ab");
  const std::vector<uint8_t> image = testing::GgufImage()
                                         .String("tokenizer.ggml.model", "gpt2")
                                         .String("tokenizer.ggml.pre", "gpt-2")
                                         .Strings("tokenizer.ggml.tokens", spec.tokens)
                                         .Strings("tokenizer.ggml.merges", {"a b"})
                                         .Bytes();
  const std::string path =
      ::testing::TempDir() + "tokenize_tiny_" + std::to_string(getpid()) + ".gguf";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(image.data()), std::streamsize(image.size()));
  return path;
}

TEST(Tokenize, ABadLineIsNamedAndEndsTheRun) {
  const std::string path = TinyVocabFile();
  // "a" is token 64 (after the printable bytes before it), " " 220 and "ab" 256; the line after
  // the bad one is never read.
  auto r = RunCtxpar({"tokenize", "--model-path", path}, {}, "\"ab a\"\n[\"ab\"]\n\"a\"\n");
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(r.out, "[256,220,64]\n");
  EXPECT_EQ(r.err,
            "ctxpar tokenize: stdin line 2 is JSON array, not a string: each line must be one "
            "JSON string, such as \"Hello\\n\"\n");
  r = RunCtxpar({"tokenize", "--model-path", path}, {}, "\"ab\"\nab\n");
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(r.out, "[256]\n");
  EXPECT_TRUE(r.err.starts_with("ctxpar tokenize: stdin line 2 is not JSON: ")) << r.err;
  // Special tokens typed in the text are text, and no BOS is added.
  r = RunCtxpar({"tokenize", "--model-path", path}, {}, "\"\"\n\"\\u00e9\"\n");
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(r.out, "[]\n[" + std::to_string(0xC3 - 0xAE + 94 + 12) + "," +
                       std::to_string(0xA9 - 0xA1 + 94) + "]\n");
  std::remove(path.c_str());
}

TEST(Tokenize, RefusesAVocabularyItCannotUseWithItsCatalogId) {
  TokenizerSpec spec;
  testing::AddByteLevelTokens(spec);
  const std::vector<uint8_t> image = testing::GgufImage()
                                         .String("tokenizer.ggml.model", "gpt2")
                                         .String("tokenizer.ggml.pre", "gpt-2")
                                         .Strings("tokenizer.ggml.tokens", spec.tokens)
                                         .Bytes();
  const std::string path =
      ::testing::TempDir() + "tokenize_nomerges_" + std::to_string(getpid()) + ".gguf";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(image.data()), std::streamsize(image.size()));
  const auto r = RunCtxpar({"tokenize", "--model-path", path}, {}, "\"a\"\n");
  std::remove(path.c_str());
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("tokenizer.ggml.merges is missing or empty"), std::string::npos) << r.err;
  EXPECT_TRUE(r.err.ends_with("\nrun: ctxpar explain CTXPAR-GGUF-008\n")) << r.err;
}

}  // namespace
}  // namespace ctxpar
