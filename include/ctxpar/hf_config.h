// A HF transformers checkpoint directory's config.json, read without knowing its architecture:
// its text, and the architecture it names (the registry, src/models/registry.h, picks the model;
// each model reads its own keys).
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "ctxpar/status.h"

namespace ctxpar {

// The text of the file at `path`; NotFound when it cannot be opened.
Expected<std::string> ReadHfConfigText(const std::string& path);

// The architecture DIR/config.json names (its one `architectures` entry); NotFound when the file
// cannot be opened, CTXPAR-HF-001 when it is not a JSON object with one such entry.
Expected<std::string> ReadHfArchitecture(const std::string& dir);

}  // namespace ctxpar
