// The detokenizer on SmolLM2's real token pieces: after every token, what it has released must be
// what a reference computes from the whole text decoded so far (complete characters, up to the
// first stop string to end, less a tail that could begin a stop string); at the end, the text
// written out by hand.
#include "ctxpar/detokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "ctxpar/gguf.h"
#include "text/byte_level.h"

namespace ctxpar {
namespace {

// The complete characters of `bytes`: a trailing incomplete sequence cut off (the inputs here are
// valid UTF-8 cut at token boundaries).
std::string CompletePrefix(const std::string& bytes) {
  size_t start = bytes.size();
  while (start > 0 && (static_cast<unsigned char>(bytes[start - 1]) & 0xC0) == 0x80) --start;
  if (start == 0) return bytes;
  const auto lead = static_cast<unsigned char>(bytes[start - 1]);
  const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return bytes.size() - (start - 1) < len ? bytes.substr(0, start - 1) : bytes;
}

struct Expectation {
  std::string released;  // all the text that may be final
  std::optional<std::string> matched;
};

// From the text so far: the text before the stop string whose occurrence ends first (ties: the
// one starting first), or else the text less its longest tail that is a proper prefix of a stop.
Expectation Reference(const std::string& text, const std::vector<std::string>& stops) {
  size_t end = std::string::npos, pos = 0;
  std::optional<std::string> matched;
  for (const std::string& s : stops) {
    const size_t p = text.find(s);
    if (s.empty() || p == std::string::npos) continue;
    if (p + s.size() < end || (p + s.size() == end && p < pos)) {
      end = p + s.size(), pos = p, matched = s;
    }
  }
  if (matched) return {text.substr(0, pos), matched};
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t n = 1; n < s.size() && n <= text.size(); ++n) {
      if (text.ends_with(s.substr(0, n))) hold = std::max(hold, n);
    }
  }
  return {text.substr(0, text.size() - hold), std::nullopt};
}

class DetokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("CTXPAR_MODEL");
    if (path == nullptr || *path == '\0') return;
    auto file = GgufFile::Open(path);
    if (!file.ok()) return;
    auto tokenizer = Tokenizer::FromGguf(*file);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    tokenizer_.emplace(std::move(tokenizer).value());
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }

  void SetUp() override {
    if (!tokenizer_) {
      GTEST_SKIP() << "no SmolLM2 GGUF at CTXPAR_MODEL: run scripts/test.sh, or export "
                      "CTXPAR_MODEL=$(bash scripts/fetch-model.sh)";
    }
  }

  static const Tokenizer& tok() { return *tokenizer_; }

  // One token per byte of `text` (SmolLM2 has a byte-level token for every byte used here): the
  // worst cut, inside every character.
  static std::vector<int32_t> ByteTokens(const std::string& text) {
    std::vector<int32_t> ids;
    for (unsigned char b : text) {
      ids.push_back(tok().TokenId(testing::Utf8(testing::ByteCodePoint(b))));
      EXPECT_GE(ids.back(), 0) << "no token for byte " << int(b);
    }
    return ids;
  }

  // Streams `ids` and checks every step against Reference; returns the whole output.
  static std::string Stream(const std::vector<int32_t>& ids, const std::vector<std::string>& stops,
                            bool render_special = false) {
    Detokenizer d(tok(), stops, render_special);
    std::string released;
    std::vector<int32_t> so_far;
    for (int32_t id : ids) {
      so_far.push_back(id);
      auto chunk = d.Push(id);
      EXPECT_TRUE(chunk.ok()) << chunk.status().ToString();
      released += *chunk;
      const Expectation want =
          Reference(CompletePrefix(*tok().Decode(so_far, render_special)), stops);
      EXPECT_EQ(released, want.released) << "after " << so_far.size() << " tokens";
      EXPECT_EQ(d.stopped(), want.matched.has_value());
      if (want.matched) {
        EXPECT_EQ(d.matched_stop(), *want.matched);
        break;
      }
    }
    released += d.Finish();
    return released;
  }

  static std::optional<Tokenizer> tokenizer_;
};

std::optional<Tokenizer> DetokenizerTest::tokenizer_;

TEST_F(DetokenizerTest, WithoutStopStringsEveryCompleteCharacterIsReleased) {
  const std::string text =
      "Hello, world! \xC3\x9Cn\xC3\xAF \xE6\x97\xA5\xE6\x9C\xAC "
      "\xF0\x9F\x8E\x89 done.";
  EXPECT_EQ(Stream(tok().Encode(text), {}), text);
  EXPECT_EQ(Stream(ByteTokens(text), {}), text);
  EXPECT_EQ(Stream(tok().Encode(text), {""}), text);  // an empty stop string is no stop
}

TEST_F(DetokenizerTest, StopStringSpanningTokens) {
  const std::string text = "The answer is 42.\nQuestion: why is it 42?";
  const std::vector<int32_t> ids = tok().Encode(text);
  int pieces_in_stop = 0;  // the stop string must cover several tokens for the test to mean it
  std::string bytes;
  for (int32_t id : ids) {
    const std::string piece = *tok().TokenToPiece(id);
    if (bytes.size() + piece.size() > 17 && bytes.size() < 27) ++pieces_in_stop;
    bytes += piece;
  }
  ASSERT_GE(pieces_in_stop, 3);
  EXPECT_EQ(Stream(ids, {"\nQuestion:"}), "The answer is 42.");
  EXPECT_EQ(Stream(ByteTokens(text), {"\nQuestion:"}), "The answer is 42.");
  // Nothing comes after the stop.
  Detokenizer d(tok(), {"42"}, false);
  std::string out;
  for (int32_t id : ids) out += *d.Push(id);
  EXPECT_EQ(out, "The answer is ");
  EXPECT_EQ(d.Finish(), "");
  // keep_stop (SGLang's no_stop_trim): the text ends with the stop string instead.
  for (const std::vector<int32_t>& tokens : {ids, ByteTokens(text)}) {
    Detokenizer keep(tok(), {"\nQuestion:", "why"}, false, /*keep_stop=*/true);
    std::string kept;
    for (int32_t id : tokens) kept += *keep.Push(id);
    kept += keep.Finish();
    EXPECT_EQ(kept, "The answer is 42.\nQuestion:");
    EXPECT_EQ(keep.matched_stop(), "\nQuestion:");
  }
}

TEST_F(DetokenizerTest, StopStringsInsideMultiByteCharacters) {
  // "price: 日曜日本円" with the stop "日本": the first 日 is held back, then released by 曜.
  const std::string sun = "\xE6\x97\xA5", yo = "\xE6\x9B\x9C", book = "\xE6\x9C\xAC";
  const std::string yen = "\xE5\x86\x86";
  const std::string text = "price: " + sun + yo + sun + book + yen;
  for (const auto& ids : {tok().Encode(text), ByteTokens(text)}) {
    EXPECT_EQ(Stream(ids, {sun + book}), "price: " + sun + yo);
    EXPECT_EQ(Stream(ids, {book + yen}), "price: " + sun + yo + sun);
  }
  // A stop string that is one 4-byte character, cut into four tokens.
  const std::string party = "\xF0\x9F\x8E\x89";
  EXPECT_EQ(Stream(ByteTokens("ok " + party + " more"), {party}), "ok ");
  // A stop string that shares only its first bytes with a character of the text never matches.
  EXPECT_EQ(Stream(ByteTokens(sun + yo), {"\xE6\x97\xA6"}), sun + yo);
}

TEST_F(DetokenizerTest, SeveralStopStringsTheFirstToEndWins) {
  const std::string text = "stop me here and there";
  const std::vector<int32_t> ids = tok().Encode(text);
  EXPECT_EQ(Stream(ids, {"there", "here"}), "stop me ");
  EXPECT_EQ(Stream(ids, {"here", "there"}), "stop me ");
  // "me" and "stop me" end at the same byte: the one starting first wins.
  EXPECT_EQ(Stream(ids, {"me", "stop me"}), "");
  // "b" ends before "abc": the cut does not depend on the tokens carrying "abc" whole.
  for (const auto& cut : {tok().Encode("xabcx"), ByteTokens("xabcx")}) {
    EXPECT_EQ(Stream(cut, {"abc", "b"}), "xa");
  }
}

TEST_F(DetokenizerTest, StopStringThatIsAPrefixOfAnother) {
  EXPECT_EQ(Stream(tok().Encode("xxabcd"), {"abc", "ab"}), "xx");
  // Both "abc" and "abd" keep "ab" held back until the next byte decides.
  for (const auto& ids : {tok().Encode("x abd y"), ByteTokens("x abd y")}) {
    EXPECT_EQ(Stream(ids, {"abc", "abd"}), "x ");
    EXPECT_EQ(Stream(ids, {"abc", "abe"}), "x abd y");
  }
}

TEST_F(DetokenizerTest, FinishReleasesWhatWasHeldBack) {
  Detokenizer d(tok(), {"world", "wo"}, false);
  std::string out;
  for (int32_t id : ByteTokens("Hello w")) out += *d.Push(id);
  EXPECT_EQ(out, "Hello ");
  EXPECT_EQ(d.Finish(), "w");
  EXPECT_FALSE(d.stopped());
  // An incomplete character at the end is U+FFFD.
  Detokenizer cut(tok(), {}, false);
  std::string head;
  for (int32_t id : ByteTokens("a\xE6\x97")) head += *cut.Push(id);
  EXPECT_EQ(head, "a");
  EXPECT_EQ(cut.Finish(), "\xEF\xBF\xBD");
  // ... which can complete a stop string.
  Detokenizer replaced(tok(), {"a\xEF\xBF\xBD"}, false);
  for (int32_t id : ByteTokens("a\xE6\x97")) EXPECT_EQ(*replaced.Push(id), "");
  EXPECT_EQ(replaced.Finish(), "");
  EXPECT_TRUE(replaced.stopped());
}

TEST_F(DetokenizerTest, SpecialTokensRenderedOnlyWhenAsked) {
  const std::vector<int32_t> ids =
      tok().Encode("<|im_start|>assistant\nHi there<|im_end|>", {.parse_special = true});
  EXPECT_EQ(Stream(ids, {}, false), "assistant\nHi there");
  EXPECT_EQ(Stream(ids, {}, true), "<|im_start|>assistant\nHi there<|im_end|>");
  // A stop string on a special token's text matches only when that text is rendered.
  EXPECT_EQ(Stream(ids, {"<|im_end|>"}, true), "<|im_start|>assistant\nHi there");
  EXPECT_EQ(Stream(ids, {"<|im_end|>"}, false), "assistant\nHi there");
}

TEST_F(DetokenizerTest, BadTokenIdIsAnErrorAndChangesNothing) {
  Detokenizer d(tok(), {"lo w"}, false);
  std::string out;
  for (int32_t id : tok().Encode("Hel")) out += *d.Push(id);
  auto bad = d.Push(tok().vocab_size());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  for (int32_t id : tok().Encode("lo world")) out += *d.Push(id);
  EXPECT_EQ(out + d.Finish(), "Hel");
  EXPECT_EQ(d.matched_stop(), "lo w");
}

}  // namespace
}  // namespace ctxpar
