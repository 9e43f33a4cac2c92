// Detokenizer: the text of a request's output tokens as they come, with its stop strings.
//
// Push(token) returns the text that is now final: complete UTF-8 (Utf8StreamDecoder), with any
// tail that could still be the beginning of a stop string held back. When the text produced so
// far contains a stop string, the text before it is released, the rest is dropped and stopped()
// becomes true (the stop string is not part of the output, as OpenAI and SGLang return it,
// unless keep_stop: SGLang's no_stop_trim).
// Several stop strings: the one whose first occurrence ends first wins, and among those ending
// at the same byte the one starting first; that is the stop a byte-by-byte stream meets first,
// so the output does not depend on where the tokens cut the text (with "b" and "abc" in "abc",
// "b" wins; with "ab" and "abc", "ab"). Finish() releases what is held back at the end of the
// request (a partial stop string that never completed is text; an incomplete UTF-8 sequence
// becomes U+FFFD, and a stop string completed by it still stops).
//
// Special tokens give their text only when render_special is set (SamplingParams::
// skip_special_tokens false).
//
// Thread safety: one Detokenizer per request, used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ctxpar/status.h"
#include "ctxpar/tokenizer.h"

namespace ctxpar {

class Detokenizer {
 public:
  // `tokenizer` (not owned) must outlive the Detokenizer. Empty stop strings are ignored.
  Detokenizer(const Tokenizer& tokenizer, std::vector<std::string> stop, bool render_special,
              bool keep_stop = false);

  // The newly final text after `token`; empty once stopped. An id outside the vocabulary is an
  // error (the Detokenizer is unchanged).
  Expected<std::string> Push(int32_t token);
  // The rest of the text at the end of the request; empty once stopped. Call it once.
  std::string Finish();

  bool stopped() const { return stopped_; }
  // The stop string that matched, when stopped().
  const std::string& matched_stop() const { return matched_; }

 private:
  bool FindStop();
  size_t HoldBack() const;
  std::string Release(bool all);

  Utf8StreamDecoder stream_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded but not yet released
  bool keep_stop_ = false;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace ctxpar
