// `ctxpar tokenize --model-path F`: the token ids of texts, as llama.cpp's llama_tokenize gives
// them with add_special and parse_special false. Reads one JSON string per line on stdin and
// prints one JSON array of ids per line (flushed, so that it can serve as a co-process). Needs
// only the file's tokenizer.* metadata: a vocabulary-only GGUF (no tensors) will do.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "ctxpar/gguf.h"
#include "ctxpar/tokenizer.h"
#include "error_report.h"
#include "launch_flags.h"

namespace ctxpar::cli {
namespace {

int RunTokenize(const std::vector<std::string>& args) {
  CLI::App app{
      "Print the token ids of texts: one JSON string per line on stdin, one JSON array of ids "
      "per line on stdout (no BOS/EOS; special tokens typed in the text are text).",
      "ctxpar tokenize"};
  std::string model_path;
  app.add_option("--model-path", model_path, "A GGUF file; its vocabulary alone is read.")
      ->required();
  Status status;
  if (int rc = ParseCommandLine(app, args, "tokenize", &status); rc >= 0) {
    return rc == kExitOk ? rc : ReportError(status);
  }
  Expected<GgufFile> file = GgufFile::Open(model_path);
  if (!file.ok()) return ReportError(file.status());
  Expected<Tokenizer> tokenizer = Tokenizer::FromGguf(*file);
  if (!tokenizer.ok()) return ReportError(tokenizer.status());
  const EncodeOptions options{.add_special = false, .parse_special = false};
  std::string line;
  for (long long number = 1; std::getline(std::cin, line); ++number) {
    nlohmann::json text;
    try {
      text = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      std::fprintf(stderr, "ctxpar tokenize: stdin line %lld is not JSON: %s\n", number, e.what());
      return kExitInvalid;
    }
    if (!text.is_string()) {
      std::fprintf(stderr,
                   "ctxpar tokenize: stdin line %lld is JSON %s, not a string: each line must be "
                   "one JSON string, such as \"Hello\\n\"\n",
                   number, text.type_name());
      return kExitInvalid;
    }
    const std::vector<int32_t> ids = tokenizer->Encode(text.get<std::string>(), options);
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
    std::fflush(stdout);
  }
  return kExitOk;
}

}  // namespace

CTXPAR_REGISTER_COMMAND("tokenize", "Print the token ids of JSON strings read from stdin",
                        RunTokenize);

}  // namespace ctxpar::cli
