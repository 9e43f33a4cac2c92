// The Llama forward on CPU from a GGUF file, with tensor parallelism and decode context
// parallelism (DESIGN.md §3).
//
// Layout over the ranks of one TP group (tp ranks, DCP groups of dcp contiguous ranks):
// - Attention: q heads and kv heads are split evenly over the tp ranks; o_proj is row-sharded
//   (each rank multiplies its heads' columns) and summed over the group. With dcp > 1 a rank
//   attends for the widened head set of its DCP group over its own shard of the KV cache
//   (position p on dcp rank p % dcp); it computes K/V for the group's kv heads, stores the
//   tokens it owns, and DcpAttention merges the partial states. --dcp-replicate-q-proj: the rank
//   projects Q for the whole widened head set.
// - MLP: gate/up column-sharded, down row-sharded and summed; lm_head vocab-sharded and
//   all-gathered, so every rank ends with the same logits.
// - Sums over the group are deterministic: each row-sharded product is computed as
//   num_kv_heads fixed column segments whose partials are added in segment order, on one rank
//   or across many, so a (tp, dcp = 1) run equals the tp = 1 run bit for bit. DCP changes only
//   the order of the attention softmax sums (merge.h), not the tokens in practice.
// - Numerics: weights stay Q4_1 / Q8_0 as in the file and multiply fp32 activations (or, with
//   quantize_activations, int8 ones like llama.cpp's CPU backend; model/linear.h); RMSNorm and
//   RoPE in ggml's normal (adjacent pairs) mode as llama.cpp runs the llama architecture; fp32
//   KV cache.
//
// One sequence per model. Forward(tokens) appends tokens at positions [position(), position() +
// n) and returns the logits [vocab] of the last one; prefill passes the prompt (one batched pass,
// causal), decode one token at a time.
//
// Thread safety: a LlamaModel belongs to one rank and is used by one thread; Create and Forward
// are collective over the TP communicator (every rank calls them with the same arguments).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/gguf.h"
#include "ctxpar/status.h"

namespace ctxpar {

struct LlamaHparams {
  std::string architecture;  // general.architecture ("llama")
  int vocab_size = 0;
  int dim = 0;  // embedding_length
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int rope_dims = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  int context_length = 0;
  bool tied_embeddings = false;  // no output.weight: lm_head is token_embd
};

// Reads `<arch>.*` metadata, naming the key of anything missing or out of range.
Expected<LlamaHparams> ReadLlamaHparams(const GgufFile& file);

struct LlamaParallel {
  int tp_size = 1;
  int dcp_size = 1;
  std::string dcp_comm_backend = "ag_rs";  // ag_rs, a2a, shm_a2a
  bool replicate_q_proj = false;
  int num_threads = 1;     // per rank
  int max_seq_len = 4096;  // KV capacity of the sequence
  int page_size = 16;      // a multiple of 16 gives the KV cache kTiles16 pages (attention.h)
  // Quantize activations to int8 per 32-block before each matmul, as llama.cpp's CPU backend
  // does (its numerics; faster prefill). Off: fp32 activations, whose rounding differences do not
  // grow, so greedy output stays identical across DCP sizes and backends.
  bool quantize_activations = false;
};

class LlamaModel {
 public:
  // Collective over tp (size tp_size). Validates the layout against the model (tp divides the
  // kv heads, dcp divides tp, max_seq_len within the context) and the tensor types.
  static Expected<std::unique_ptr<LlamaModel>> Create(std::shared_ptr<const GgufFile> file,
                                                      Communicator& tp,
                                                      const LlamaParallel& parallel);
  ~LlamaModel();

  const LlamaHparams& hparams() const;
  int position() const;
  // Appends tokens (1 <= n, ids in [0, vocab)), returns the logits of the last one.
  Expected<std::vector<float>> Forward(std::span<const int32_t> tokens);
  // Forgets the sequence (position 0 again).
  Status Reset();

 private:
  struct Impl;
  explicit LlamaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctxpar
