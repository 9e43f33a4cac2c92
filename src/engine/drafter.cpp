#include "engine/drafter.h"

#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "ctxpar/error_catalog.h"
#include "ctxpar/tokenizer.h"

namespace ctxpar::engine {

namespace {

class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(const NgramOptions& options, int64_t capacity)
      : options_(options), store_(capacity) {}

  // The request's own text first: it predicts the request better than other requests do.
  Status Draft(std::span<const DraftWant> wants) override {
    for (const DraftWant& w : wants) {
      w.seq->draft = NgramDraft(w.seq->tokens, options_, w.max_tokens);
      if (w.seq->draft.empty()) {
        w.seq->draft = store_.Draft(w.seq->tokens, options_.branch_length, w.max_tokens);
      }
    }
    return Status::Ok();
  }
  void Forget(uint64_t) override {}
  void Learn(std::span<const int32_t> tokens) override { store_.Add(tokens); }
  void Clear() override { store_ = NgramStore(store_.capacity()); }

 private:
  NgramOptions options_;
  NgramStore store_;
};

// How the draft's vocabulary differs from the target's, or "" when an id means the same token to
// both: the same size, and the same text for every id where both carry a tokenizer.
std::string VocabularyDifference(const ModelSource& draft, const ModelSource& target) {
  const int a = draft.desc().vocab_size, b = target.desc().vocab_size;
  if (a != b) return fmt::format("the draft's vocabulary has {} tokens, the target's {}", a, b);
  const Tokenizer* x = draft.tokenizer();
  const Tokenizer* y = target.tokenizer();
  if (x == nullptr || y == nullptr) return "";
  if (x->vocab_size() != y->vocab_size()) {
    return fmt::format("the draft's tokenizer has {} tokens, the target's {}", x->vocab_size(),
                       y->vocab_size());
  }
  for (int32_t id = 0; id < x->vocab_size(); ++id) {
    if (x->token_text(id) != y->token_text(id)) {
      return fmt::format("token {} is {} to the draft and {} to the target", id,
                         PyRepr(x->token_text(id)), PyRepr(y->token_text(id)));
    }
  }
  return "";
}

}  // namespace

std::unique_ptr<Drafter> MakeNgramDrafter(const NgramOptions& options, int64_t capacity) {
  return std::make_unique<NgramDrafter>(options, capacity);
}

Expected<std::unique_ptr<ModelSource>> OpenDraftModel(const EngineConfig& config,
                                                      const ModelSource& target) {
  const std::string& path = config.speculative_draft_model_path;
  // OpenModelSource sends a missing file to fetch the target model, which is no help here.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return CatalogError("CTXPAR-SPEC-006",
                        {{"path", path}, {"error", "no such file or directory"}});
  }
  Expected<std::unique_ptr<ModelSource>> draft = OpenModelSource(path);
  if (!draft.ok()) {
    return CatalogError("CTXPAR-SPEC-006", {{"path", path}, {"error", draft.status().message()}});
  }
  if (std::string difference = VocabularyDifference(**draft, target); !difference.empty()) {
    return CatalogError(
        "CTXPAR-SPEC-007",
        {{"draft", path}, {"target", target.path()}, {"difference", std::move(difference)}});
  }
  return std::move(*draft);
}

}  // namespace ctxpar::engine
