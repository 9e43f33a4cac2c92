// CheckFinite: the stop for a forward pass whose values are no longer numbers. Sampling from NaN
// logits picks a fixed token or nothing, and generation used to end silently with exit 0; this
// check turns that into CTXPAR-MODEL-009, naming the model file and where the values were seen.
//
// Usage in a model's forward (after the final norm and lm_head, and where the cost is acceptable
// after each layer's residual, to name the first layer that went wrong):
//   CTXPAR_RETURN_IF_ERROR(CheckFinite(logits.data(), logits.size(), "the logits", file.path()));
//   CTXPAR_RETURN_IF_ERROR(CheckLayerFinite(x.data(), x.size(), l, file.path()));
// It reads every value once (about 0.02 ms for SmolLM2's 49152 logits), so the logits can be
// checked on every step.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <string_view>

#include "ctxpar/status.h"

namespace ctxpar {

// Ok when every one of values[0, n) is finite; else CTXPAR-MODEL-009 with the count of
// non-finite values, the first one's index and value, `what` ("the logits", "the output of
// layer 3") and the model file.
Status CheckFinite(const float* values, std::size_t n, std::string_view what,
                   std::string_view model_file);
// CheckFinite with what = "the output of layer {layer}", formatted only when it fails: a decode
// step checks every layer.
Status CheckLayerFinite(const float* values, std::size_t n, int layer, std::string_view model_file);

}  // namespace ctxpar
