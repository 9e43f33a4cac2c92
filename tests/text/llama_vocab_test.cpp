// llama.cpp's own tokenizer tests (tests/test-tokenizer-0.cpp): for each vocabulary-only GGUF
// in the llama-cpp-python sdist's vendor/llama.cpp/models with a .inp / .out pair, the ids of
// every input (add_special false, parse_special false) must be the .out line's. The sdist comes
// from scripts/fetch-llama-sdist.sh; scripts/test.sh exports its path as CTXPAR_LLAMA_SDIST.
// Beyond the pairs, tests/data/tokenizer/llama_vocab_golden.json holds llama.cpp's ids of 461
// more strings on each of those vocabularies and on two pre-tokenizers without one, and of 80
// strings with each vocabulary's special tokens read as a raw prompt (add_special and
// parse_special true), made by tools/golden/llama_cpp/make_vocab_golden.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ctxpar/gguf.h"
#include "ctxpar/tokenizer.h"

namespace ctxpar {
namespace {

// The models folder of the sdist's llama.cpp, or "" without the sdist.
std::string ModelsDir() {
  const char* sdist = std::getenv("CTXPAR_LLAMA_SDIST");
  if (sdist == nullptr || *sdist == '\0') return "";
  const std::string dir = std::string(sdist) + "/vendor/llama.cpp/models";
  return std::filesystem::is_directory(dir) ? dir : "";
}

constexpr const char* kSkip =
    "needs the llama-cpp-python sdist: set CTXPAR_LLAMA_SDIST to the path that "
    "scripts/fetch-llama-sdist.sh prints (scripts/test.sh does)";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// test-tokenizer-0's reading: inputs separated by "\n__ggml_vocab_test__\n", one line of
// space-separated ids per input.
std::vector<Case> ReadCases(const std::string& gguf) {
  const std::string raw = ReadAll(gguf + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(gguf + ".out");
  std::vector<Case> cases;
  size_t i = 0;
  for (std::string line; std::getline(out, line); ++i) {
    EXPECT_LT(i, inputs.size()) << gguf << ": more .out lines than inputs";
    if (i >= inputs.size()) break;
    Case c{inputs[i], {}};
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), inputs.size()) << gguf;
  return cases;
}

class LlamaVocab : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaVocab, EveryPairOfLlamaCppsTestsPasses) {
  const std::string dir = ModelsDir();
  if (dir.empty()) GTEST_SKIP() << kSkip;
  const std::string path = dir + "/ggml-vocab-" + GetParam() + ".gguf";
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto tok = Tokenizer::FromGguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<Case> cases = ReadCases(path);
  ASSERT_FALSE(cases.empty()) << path;
  for (const Case& c : cases) {
    EXPECT_EQ(tok->Encode(c.text, {.add_special = false, .parse_special = false}), c.ids)
        << GetParam() << ": '" << c.text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Sdist, LlamaVocab,
                         ::testing::Values("llama-bpe", "qwen2", "qwen35", "deepseek-llm",
                                           "deepseek-coder", "falcon", "mpt", "gpt-2", "starcoder",
                                           "refact", "command-r", "llama-spm", "phi-3", "gemma-4",
                                           "bert-bge"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

// A copy of a GGUF v3 image with tokenizer.ggml.pre's string value replaced (as
// make_vocab_golden.py writes it for llama.cpp).
std::vector<uint8_t> WithPre(const std::string& path, const std::string& pre) {
  const std::string data = ReadAll(path);
  const std::string key = "tokenizer.ggml.pre";
  std::string needle(8, '\0');
  const uint64_t key_size = key.size();
  std::memcpy(needle.data(), &key_size, 8);
  needle += key;
  const size_t at = data.find(needle) + needle.size();
  EXPECT_NE(data.find(needle), std::string::npos) << path;
  uint64_t n = 0;
  std::memcpy(&n, data.data() + at + 4, 8);  // after the u32 type
  std::string out = data.substr(0, at + 4);
  const uint64_t size = pre.size();
  out.append(reinterpret_cast<const char*>(&size), 8);
  out += pre;
  out += data.substr(at + 12 + n);
  return {out.begin(), out.end()};
}

TEST(LlamaVocabGolden, EveryVocabularyGivesLlamaCppsIdsOnMoreStrings) {
  const std::string dir = ModelsDir();
  if (dir.empty()) GTEST_SKIP() << kSkip;
  const auto golden = nlohmann::json::parse(
      ReadAll(std::string(CTXPAR_TEST_DATA_DIR) + "/tokenizer/llama_vocab_golden.json"));
  const auto texts = golden["texts"].get<std::vector<std::string>>();
  ASSERT_GT(texts.size(), 400u);
  for (const auto& v : golden["vocabs"]) {
    const std::string name = v["name"].get<std::string>();
    const std::string path = dir + "/" + v["file"].get<std::string>();
    Expected<GgufFile> file =
        v["pre"].is_null() ? GgufFile::Open(path) : GgufFile::FromBytes(WithPre(path, v["pre"]));
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto tok = Tokenizer::FromGguf(*file);
    ASSERT_TRUE(tok.ok()) << name << ": " << tok.status().ToString();
    const auto ids = v["ids"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(ids.size(), texts.size()) << name;
    int failures = 0;
    for (size_t i = 0; i < texts.size() && failures < 5; ++i) {
      const auto got = tok->Encode(texts[i], {.add_special = false, .parse_special = false});
      EXPECT_EQ(got, ids[i]) << name << ": " << nlohmann::json(texts[i]).dump();
      failures += got != ids[i];
    }
    // The vocabulary's own special tokens among the pieces, read as a raw prompt is.
    const auto special_texts = v["special_texts"].get<std::vector<std::string>>();
    const auto special_ids = v["special_ids"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(special_ids.size(), special_texts.size()) << name;
    for (size_t i = 0; i < special_texts.size() && failures < 5; ++i) {
      const auto got = tok->Encode(special_texts[i], {.add_special = true, .parse_special = true});
      EXPECT_EQ(got, special_ids[i]) << name << ": " << nlohmann::json(special_texts[i]).dump();
      failures += got != special_ids[i];
    }
  }
}

// The sdist's vocabularies without test pairs: the BPE and SentencePiece ones load (Aquila and
// GPT-NeoX name no pre-tokenizer: llama.cpp's "default"); Unigram (T5) is refused with the
// catalog ID before any compute.
TEST(LlamaVocabFiles, LoadOrAreRefusedWithTheCatalogId) {
  const std::string dir = ModelsDir();
  if (dir.empty()) GTEST_SKIP() << kSkip;
  for (const char* name : {"aquila", "baichuan", "gpt-neox"}) {
    auto file = GgufFile::Open(dir + "/ggml-vocab-" + name + ".gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto tok = Tokenizer::FromGguf(*file);
    EXPECT_TRUE(tok.ok()) << name << ": " << tok.status().ToString();
  }
  for (const auto& [name, model] : {std::pair{"nomic-bert-moe", "t5"}}) {
    auto file = GgufFile::Open(dir + "/ggml-vocab-" + name + ".gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto tok = Tokenizer::FromGguf(*file);
    ASSERT_FALSE(tok.ok()) << name;
    EXPECT_EQ(tok.status().error_id(), "CTXPAR-GGUF-008");
    EXPECT_NE(tok.status().message().find(std::string("tokenizer.ggml.model = '") + model +
                                          "' is not supported"),
              std::string::npos)
        << tok.status().message();
  }
}

}  // namespace
}  // namespace ctxpar
