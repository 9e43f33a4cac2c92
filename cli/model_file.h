// Which model file a command runs, and opening it with the advice that fits the failure: a
// missing file is told where the model comes from (scripts/fetch-model.sh, --model-path,
// CTXPAR_MODEL); a corrupt or unsupported one is not sent to download the same file again.
#pragma once

#include <string>

#include "ctxpar/config.h"
#include "ctxpar/gguf.h"
#include "ctxpar/status.h"

namespace ctxpar::cli {

// --model-path, else $CTXPAR_MODEL, else where scripts/fetch-model.sh puts SmolLM2
// ($CTXPAR_MODEL_DIR, else $XDG_CACHE_HOME/ctxpar/models, else ~/.cache/ctxpar/models).
std::string ModelPath(const ResolvedConfig& config);

// GgufFile::Open; a file that does not exist gets the fetch advice appended to its
// CTXPAR-GGUF-001 message.
Expected<GgufFile> OpenModelFile(const std::string& path);

}  // namespace ctxpar::cli
