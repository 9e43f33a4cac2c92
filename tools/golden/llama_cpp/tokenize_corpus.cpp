// Runs llama.cpp's tokenizer (libllama, vocab only) over a corpus for
// make_spm_tokenizer_golden.py, which builds this file against the llama.cpp build tree.
//
//   tokenize_corpus MODEL.gguf corpus  < records  > lines
//     records: u8 parse_special, u32 length (little endian), bytes; per record one line:
//     "<ids>;<pieces>;<pieces_special>" where <ids> are llama_tokenize(add_special = true,
//     parse_special) space-separated, <pieces> the hex of the concatenated
//     llama_token_to_piece(lstrip 0, special = false) of those ids, <pieces_special> the same
//     with special = true, and the hex of llama_detokenize(remove_special = false,
//     unparse_special = false) after a fourth ';'.
//   tokenize_corpus MODEL.gguf plain   < records  > lines
//     the same records; per record one line of llama_tokenize(add_special = false,
//     parse_special) ids, as llama.cpp's test-tokenizer-0 and `ctxpar tokenize` take them.
//   tokenize_corpus MODEL.gguf vocab    > lines
//     per token id: "<hex piece>;<hex piece special>;<ids of its text>" (add_special = false,
//     parse_special = false).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::string Hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::vector<llama_token> Tokenize(const llama_vocab* vocab, const std::string& text,
                                  bool add_special, bool parse_special) {
  std::vector<llama_token> ids(text.size() + 8);
  int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                         static_cast<int32_t>(ids.size()), add_special, parse_special);
  if (n < 0) {
    ids.resize(-n);
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                       static_cast<int32_t>(ids.size()), add_special, parse_special);
  }
  ids.resize(n);
  return ids;
}

std::string Piece(const llama_vocab* vocab, llama_token id, bool special) {
  std::string buf(64, '\0');
  int n = llama_token_to_piece(vocab, id, buf.data(), static_cast<int32_t>(buf.size()), 0, special);
  if (n < 0) {
    buf.resize(-n);
    n = llama_token_to_piece(vocab, id, buf.data(), static_cast<int32_t>(buf.size()), 0, special);
  }
  buf.resize(n);
  return buf;
}

std::string Detokenize(const llama_vocab* vocab, const std::vector<llama_token>& ids) {
  std::string buf(ids.size() * 16 + 16, '\0');
  int n = llama_detokenize(vocab, ids.data(), static_cast<int32_t>(ids.size()), buf.data(),
                           static_cast<int32_t>(buf.size()), false, false);
  if (n < 0) {
    buf.resize(-n);
    n = llama_detokenize(vocab, ids.data(), static_cast<int32_t>(ids.size()), buf.data(),
                         static_cast<int32_t>(buf.size()), false, false);
  }
  buf.resize(n);
  return buf;
}

void PrintIds(const std::vector<llama_token>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
}

bool ReadExact(void* dst, size_t n) { return std::fread(dst, 1, n, stdin) == n; }

}  // namespace

int main(int argc, char** argv) {
  const bool plain = argc == 3 && std::strcmp(argv[2], "plain") == 0;
  if (argc != 3 ||
      (std::strcmp(argv[2], "corpus") != 0 && std::strcmp(argv[2], "vocab") != 0 && !plain)) {
    std::fprintf(stderr, "usage: %s MODEL.gguf corpus|plain|vocab\n", argv[0]);
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params params = llama_model_default_params();
  params.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], params);
  if (model == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  if (std::strcmp(argv[2], "vocab") == 0) {
    const int n = llama_vocab_n_tokens(vocab);
    for (llama_token id = 0; id < n; ++id) {
      const std::string text = llama_vocab_get_text(vocab, id);
      std::printf("%s;%s;", Hex(Piece(vocab, id, false)).c_str(),
                  Hex(Piece(vocab, id, true)).c_str());
      PrintIds(Tokenize(vocab, text, false, false));
      std::printf("\n");
    }
  } else {
    for (;;) {
      uint8_t parse_special;
      uint32_t len;
      if (!ReadExact(&parse_special, 1)) break;
      if (!ReadExact(&len, 4)) return 1;
      std::string text(len, '\0');
      if (len > 0 && !ReadExact(text.data(), len)) return 1;
      const std::vector<llama_token> ids = Tokenize(vocab, text, !plain, parse_special != 0);
      if (plain) {
        PrintIds(ids);
        std::printf("\n");
        continue;
      }
      std::string pieces, pieces_special;
      for (llama_token id : ids) {
        pieces += Piece(vocab, id, false);
        pieces_special += Piece(vocab, id, true);
      }
      PrintIds(ids);
      std::printf(";%s;%s;%s\n", Hex(pieces).c_str(), Hex(pieces_special).c_str(),
                  Hex(Detokenize(vocab, ids)).c_str());
    }
  }
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
