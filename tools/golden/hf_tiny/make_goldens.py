#!/usr/bin/env python3
"""Writes tests/data/hf_tiny/<name>/: tiny random HF checkpoints of the GGUF architectures,
converted by llama.cpp's own convert_hf_to_gguf.py to every weight type that stores their weights
exactly (F32, F16, BF16, Q8_0), and what HF transformers computes in float32 on them, for
comparing ctxpar's forwards (tests/models/hf_tiny_golden_test.cpp).

Each checkpoint: 2 layers, a 128-token SentencePiece vocabulary trained here, a fixed seed. Every
matrix holds q * 2^-e with q an integer in [-127, 127] and each 32-element block of a row holding
a +-127: such a weight is exact in BF16 (7 significant bits), F16 and Q8_0 (gguf-py's d =
amax / 127 = 2^-e, q = round(w / d)), so the four files hold the same weights and one
transformers run is the golden of all four. Norm weights and biases are any float32 (the
converter keeps 1-D tensors in F32).

Prompts are token ids (no tokenizer in the comparison): about 8, 100 and 700 of them, drawn from
the vocabulary with a fixed seed. For each: the ids, the greedy continuation of N_NEW tokens
(transformers' generate with its KV cache), the top-1 minus top-2 margin at each step, and the
top-5 (id, logit) at each step (the last prompt position, then each generated token's).

Beside them, tests/data/hf_tiny/refused/: copies of the llama Q8_0 file with one fault each (a
tensor or key the model does not read, a layer past block_count, a vocab_size that disagrees, a
weight type without a kernel (F64), a NaN norm, a NaN scale, a RoPE scaling type it does not run,
a window of 1),
written by gguf-py, and
refused.json, the catalog ID and the tensor or key each must be refused for, and one copy with no
fault, which must open (tests/models/gguf_refusal_test.cpp); tests/data/hf_tiny/deepseek_refused/
the same for the deepseek_v3 Q8_0 file (a router, RoPE scaling, MLA layout, key or tensor that
ctxpar's deepseek2 does not run); tests/data/hf_tiny/gpt_oss_refused/ for the gpt_oss_mxfp4 file
(a key or tensor it does not read, one layer, a window of 1, an MXFP4 exponent of 255).

    python3 -m venv ~/.cache/ctxpar/golden-venv
    ~/.cache/ctxpar/golden-venv/bin/pip install torch transformers sentencepiece numpy
    ~/.cache/ctxpar/golden-venv/bin/python tools/golden/hf_tiny/make_goldens.py \\
        ~/.cache/ctxpar/llama.cpp/llama-cpp-python-0.3.36/vendor/llama.cpp tests/data/hf_tiny
"""
import hashlib
import importlib.metadata
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import sentencepiece as spm
import torch
import transformers

N_NEW = 16
TOP_K = 5
PROMPT_LENGTHS = (8, 100, 700)
VOCAB = 128
OUT_TYPES = ("f32", "f16", "bf16", "q8_0")

# The shared shape: head_dim 32 is not hidden / heads (llama: attention.key_length).
BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=1024, rms_norm_eps=1e-5, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2)

# name -> (config class, HF architecture, extra config, rope parameters beside rope_theta).
# A name in ONE_TYPE gets its Q8_0 file only (a RoPE variant of an architecture tested at every
# type already).
ONE_TYPE = {"llama_linear": ("q8_0",), "phi3_longrope": ("q8_0",), "qwen2_yarn": ("q8_0",),
            "mistral": ("q8_0",), "phi3_window": ("q8_0",), "deepseek_v3_yarn": ("q8_0",),
            "gpt_oss_mxfp4": ("mxfp4",)}
# Prompt lengths of a name where not PROMPT_LENGTHS: LongRoPE's factors follow the context (ctxpar
# and llama.cpp: the configured one, HF: the sequence's), so its prompts all pass the original
# context (64), where both take the long factors.
PROMPTS = {"phi3_longrope": (100, 700)}
# LongRoPE's per-pair divisors (16 pairs of head_dim 32): short within the original context, long
# past it.
LONG_FACTORS = [1.0 + 0.5 * i for i in range(16)]
SHORT_FACTORS = [1.0 + 0.05 * i for i in range(16)]
ARCHS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}, {"rope_type": "default"}),
    # Llama 3.x: wavelengths above 64 positions scaled (rope_freqs.weight in the GGUF).
    "llama3": ("LlamaConfig", "LlamaForCausalLM", {},
               {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    # Linear RoPE scaling: rope.scaling.type linear, every angle divided by the factor.
    "llama_linear": ("LlamaConfig", "LlamaForCausalLM", {},
                     {"rope_type": "linear", "factor": 4.0}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"hidden_size": 128, "head_dim": None},
              {"rope_type": "default"}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}, {"rope_type": "default"}),
    # 8 routed experts of 64 features, 2 per token, their weights renormalized.
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                 {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                  "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []},
                 {"rope_type": "default"}),
    # YaRN by 4 over an original 256 positions: rope.scaling.type yarn in the GGUF.
    "qwen2_yarn": ("Qwen2Config", "Qwen2ForCausalLM", {"hidden_size": 128, "head_dim": None},
                   {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}),
    # Fused qkv_proj and gate_up_proj; head size hidden / heads; no window (the converter writes
    # sliding_window 0).
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             {"hidden_size": 128, "head_dim": None, "original_max_position_embeddings": 1024,
              "pad_token_id": 0, "sliding_window": None}, {"rope_type": "default"}),
    # LongRoPE: 1024 positions over an original 64, so cos and sin scale by
    # sqrt(1 + ln 16 / ln 64) and past 64 positions the long factors divide the frequencies.
    "phi3_longrope": ("Phi3Config", "Phi3ForCausalLM",
                      {"hidden_size": 128, "head_dim": None, "original_max_position_embeddings": 64,
                       "pad_token_id": 0, "sliding_window": None},
                      {"rope_type": "longrope", "long_factor": LONG_FACTORS,
                       "short_factor": SHORT_FACTORS, "original_max_position_embeddings": 64}),
    # Post-norms only, and q / k RMSNorms over every head of the model; head size hidden / heads
    # (llama.cpp's olmo2 has no key_length).
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {"hidden_size": 128, "head_dim": None},
              {"rope_type": "default"}),
    # Tied embeddings (the converter drops lm_head), even layers in a window of 64 positions,
    # query scale head_dim^-1/2 (the GGUF has no key for query_pre_attn_scalar), and softcaps
    # small enough to change the scores and logits of this model.
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               {"tie_word_embeddings": True, "query_pre_attn_scalar": 32, "sliding_window": 64,
                "attn_logit_softcapping": 10.0, "final_logit_softcapping": 15.0},
               {"rope_type": "default"}),
    # Phi-3 with a window of 64 positions on every layer (the converter writes the config's).
    "phi3_window": ("Phi3Config", "Phi3ForCausalLM",
                    {"hidden_size": 128, "head_dim": None, "original_max_position_embeddings": 1024,
                     "pad_token_id": 0, "sliding_window": 64}, {"rope_type": "default"}),
    # A window of 64 positions on every layer. The converter writes none for Mistral (llama.cpp
    # runs its files without one): the key is added to the converted file (GGUF_KEYS), as a file
    # that states its window has it.
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 64},
                {"rope_type": "default"}),
    # Ministral 3: YaRN by 4 over an original 64 positions with mscale_all_dim 0.5 (the GGUF's
    # yarn_log_multiplier, cos and sin scaled by 1.139 / 1.069), and Llama 4's attention temperature
    # 1 + 0.1 ln(1 + floor(pos / 64)) on the queries.
    "ministral3": ("Ministral3Config", "Ministral3ForCausalLM", {},
                   {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                    "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.5,
                    "llama_4_scaling_beta": 0.1}),
    # DeepSeek-V3 (GGUF deepseek2): MLA with a q LoRA, layer 0 dense, layer 1 routing 2 of 8
    # experts in 4 groups (top 2 groups) by sigmoid scores plus a correction bias, one shared
    # expert. Default RoPE: ctxpar's DeepSeek network runs no YaRN. No MTP layer (the converter
    # drops it). scoring_func and topk_method as DeepSeek-V3's config.json states them (transformers
    # keeps them unread): without scoring_func the converter writes no expert_gating_func, and
    # llama.cpp takes such a file's router as DeepSeek-V2's softmax. rms_norm_eps 1e-6, as
    # DeepSeek-V3's: transformers' q_a_layernorm and kv_a_layernorm take their default 1e-6
    # whatever the config says, llama.cpp, SGLang and ctxpar the config's (at 1e-5 the logits
    # differ by up to 9e-4).
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    {"head_dim": None, "num_key_value_heads": 4, "q_lora_rank": 32,
                     "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
                     "v_head_dim": 16, "moe_intermediate_size": 32, "n_routed_experts": 8,
                     "n_group": 4, "topk_group": 2, "num_experts_per_tok": 2,
                     "n_shared_experts": 1, "first_k_dense_replace": 1,
                     "routed_scaling_factor": 2.5, "norm_topk_prob": True, "num_mtp_layers": 0,
                     "scoring_func": "sigmoid", "topk_method": "noaux_tc", "rms_norm_eps": 1e-6},
                    {"rope_type": "default"}),
    # gpt-oss: q/k/v/o biases, a learned sink per head in every softmax's denominator, layer 0 in
    # a window of 64 positions and layer 1 global, 8 experts of 128 features with biases, 2 a
    # token (top 2 of the router's logits, softmax over those), SwiGLU-OAI; YaRN by 4 over an
    # original 256 positions with the real configs' beta_fast, beta_slow and "truncate": false
    # (which the GGUF does not carry: ctxpar's gpt-oss runs it, llama.cpp rounds the range out).
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                {"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 128,
                 "sliding_window": 64, "attention_bias": True},
                {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                 "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}),
}
# DeepSeek-V2 (GGUF deepseek2 too): no q LoRA (V2-Lite's q_proj, attn_q in the file), the softmax
# router with group_limited_greedy (each group scored by its best expert), no correction bias,
# weights not renormalized; the converter writes no expert_gating_func (llama.cpp: softmax).
ARCHS["deepseek_v2"] = ("DeepseekV2Config", "DeepseekV2ForCausalLM",
                        {"head_dim": None, "num_key_value_heads": 4, "q_lora_rank": None,
                         "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
                         "v_head_dim": 16, "moe_intermediate_size": 32, "n_routed_experts": 8,
                         "n_group": 4, "topk_group": 2, "topk_method": "group_limited_greedy",
                         "num_experts_per_tok": 2, "n_shared_experts": 1,
                         "first_k_dense_replace": 1, "routed_scaling_factor": 2.0,
                         "norm_topk_prob": False, "rms_norm_eps": 1e-6},
                        {"rope_type": "default"})
# DeepSeek-V3's YaRN (factor 40 over 4096 positions in the real one): by 4 over 64 positions,
# mscale = mscale_all_dim = 1 (cos and sin unscaled, q . k by (1 + 0.1 ln 4)^2).
ARCHS["deepseek_v3_yarn"] = ARCHS["deepseek_v3"][:3] + (
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
     "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},)
# gpt-oss with its experts in MXFP4, as the real files hold them: the same model, the experts' weights
# drawn from MXFP4's grid (MXFP4_EXPERTS), the file F32 with the three expert tensors re-encoded
# by gguf-py (exactly: every 32-block is 2^-6 times doubled e2m1 values with a +-12).
ARCHS["gpt_oss_mxfp4"] = ARCHS["gpt_oss"]
MXFP4_EXPERTS = {"gpt_oss_mxfp4"}

# Keys added to a name's converted files: (value, gguf-py value type name).
GGUF_KEYS = {"mistral": {"llama.attention.sliding_window": (64, "UINT32")}}

# The architectures whose converter takes the vocabulary from a BPE tokenizer.json only (TextModel's
# default, and DeepseekV2Model's own set_vocab): converted with the SentencePiece reader that the
# others use, since the tests compare token ids and this checkpoint has no BPE tokenizer.
SPM_VOCAB = {"olmo2", "qwen3moe", "deepseek_v3", "deepseek_v3_yarn", "deepseek_v2", "gpt_oss",
             "gpt_oss_mxfp4"}
CONVERT_WITH_SPM = """
import runpy, sys
convert = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, str(__import__("pathlib").Path(convert).parent))
from conversion import base, deepseek, gpt_oss
base.TextModel.set_vocab = base.TextModel._set_vocab_sentencepiece
deepseek.DeepseekV2Model.set_vocab = base.TextModel._set_vocab_sentencepiece
gpt_oss.GptOssModel.set_vocab = base.TextModel._set_vocab_sentencepiece
runpy.run_path(convert, run_name="__main__")
"""

CORPUS = (
    "The history of computing is a story of abstraction. Early machines were programmed by "
    "rewiring panels and flipping switches; each new problem meant a new physical "
    "configuration. Stored-program computers changed that: instructions became data, kept in "
    "the same memory as the numbers they operated on. Assembly languages gave names to "
    "machine instructions, and compilers translated higher-level languages into them.\n"
)


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train_tokenizer(out_dir: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = pathlib.Path(tmp) / "corpus.txt"
        corpus.write_text(CORPUS * 20)
        spm.SentencePieceTrainer.train(
            input=str(corpus), model_prefix=str(out_dir / "tokenizer"), vocab_size=VOCAB,
            model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
            num_threads=1, minloglevel=2)
    (out_dir / "tokenizer.vocab").unlink()


def grid_weight(shape, exponent: int, gen: torch.Generator) -> torch.Tensor:
    """q * 2^-exponent, q in [-127, 127], each 32-block of a row holding a +-127."""
    q = torch.randint(-126, 127, shape, generator=gen, dtype=torch.int32)
    rows, cols = shape
    blocks = cols // 32
    at = torch.randint(0, 32, (rows, blocks), generator=gen) + 32 * torch.arange(blocks)
    sign = torch.randint(0, 2, (rows, blocks), generator=gen) * 2 - 1
    q.scatter_(1, at, 127 * sign.to(torch.int32))
    return q.to(torch.float32) * 2.0 ** -exponent


def mxfp4_weight(shape, exponent: int, gen: torch.Generator) -> torch.Tensor:
    """Doubled e2m1 values (MXFP4's kvalues) * 2^-exponent, each 32-block of a row holding a
    +-12, so that gguf-py's MXFP4 scale is 2^-exponent and every value exact."""
    values = torch.tensor([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12],
                          dtype=torch.float32)
    q = values[torch.randint(0, 16, shape, generator=gen)]
    rows, cols = shape
    blocks = cols // 32
    at = torch.randint(0, 32, (rows, blocks), generator=gen) + 32 * torch.arange(blocks)
    sign = torch.randint(0, 2, (rows, blocks), generator=gen) * 2 - 1
    q.scatter_(1, at, 12.0 * sign.to(torch.float32))
    return q * 2.0 ** -exponent


def set_weights(model, gen: torch.Generator, mxfp4_experts: bool = False) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 3 and mxfp4_experts:
                for e in range(p.shape[0]):
                    p[e].copy_(mxfp4_weight(tuple(p.shape[1:])[::-1], 6, gen).T)
            elif p.dim() == 3 and model.config.model_type == "gpt_oss":
                # [experts, cols, rows]: the GGUF holds each expert transposed, and its rows'
                # 32-blocks must hold the +-127.
                for e in range(p.shape[0]):
                    p[e].copy_(grid_weight(tuple(p.shape[1:])[::-1], 9, gen).T)
            elif p.dim() == 3:  # fused experts [experts, rows, cols]: each expert a grid matrix
                for e in range(p.shape[0]):
                    p[e].copy_(grid_weight(tuple(p.shape[1:]), 9, gen))
            elif name.endswith("bias"):  # gpt-oss's expert biases are [experts, rows]
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("self_attn.sinks"):
                # exp(sink) large beside the sum over up to 700 keys of exp(score ~ 0), so that
                # the sinks weigh on the long prompts too.
                p.copy_(4.0 + 1.0 * torch.randn(p.shape, generator=gen))
            elif name.endswith("mlp.gate.weight") or name.endswith("mlp.router.weight"):
                # A router at 2^-9 scores the experts so alike that the top-k hangs on rounding.
                p.copy_(grid_weight(tuple(p.shape), 4, gen))
            elif p.dim() == 2:
                # A tied embedding is also Gemma's input, scaled by sqrt(hidden): at 2^-7 it
                # drowns what the layers add, and every prompt continues with one token.
                big = ("embed_tokens" in name or "lm_head" in name) and \
                    not model.config.tie_word_embeddings
                p.copy_(grid_weight(tuple(p.shape), 7 if big else 9, gen))
            else:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
        # DeepSeek's router correction bias is a buffer: at 0.3 it changes which experts a token
        # takes, so a forward without it fails the golden.
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.3 * torch.randn(b.shape, generator=gen))


def top(logits: torch.Tensor) -> list:
    v, i = torch.topk(logits, TOP_K)
    return [[int(a), round(float(b), 6)] for a, b in zip(i, v)]


def run(model, ids: list) -> dict:
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=N_NEW,
                             min_new_tokens=N_NEW, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    greedy, margins, tops = [], [], []
    for step in gen.logits:
        v, i = torch.topk(step[0], 2)
        greedy.append(int(i[0]))
        margins.append(round(float(v[0] - v[1]), 6))
        tops.append(top(step[0]))
    assert greedy == gen.sequences[0, len(ids):].tolist()
    return {"prompt_ids": ids, "greedy": greedy, "margins": margins, "top": tops}


def make(name: str, llama_cpp: pathlib.Path, out_root: pathlib.Path, seed: int) -> None:
    config_class, hf_arch, extra, rope = ARCHS[name]
    kwargs = dict(BASE, **extra)
    if kwargs["head_dim"] is None:
        del kwargs["head_dim"]
    rope = dict(rope, rope_theta=10000.0)
    config = getattr(transformers, config_class)(**kwargs, rope_parameters=rope)
    config.architectures = [hf_arch]
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, hf_arch)(config).to(torch.float32)
    set_weights(model, torch.Generator().manual_seed(seed), name in MXFP4_EXPERTS)
    model.eval()
    out_dir = out_root / name
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = pathlib.Path(tmp) / "hf"
        model.save_pretrained(hf_dir)
        train_tokenizer(hf_dir)
        (hf_dir / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False}))
        files = {}
        for out_type in ONE_TYPE.get(name, OUT_TYPES):
            gguf = out_dir / f"{name}-{out_type}.gguf"
            convert_type = "f32" if out_type == "mxfp4" else out_type
            args = [str(hf_dir), "--outtype", convert_type, "--outfile", str(gguf)]
            convert = llama_cpp / "convert_hf_to_gguf.py"
            command = [sys.executable, str(convert), *args]
            if name in SPM_VOCAB:
                command = [sys.executable, "-c", CONVERT_WITH_SPM, str(convert), *args]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            if name in GGUF_KEYS:
                add_keys(llama_cpp, gguf, GGUF_KEYS[name])
            if out_type == "mxfp4":
                experts_to_mxfp4(llama_cpp, gguf)
            files[out_type] = {"file": gguf.name, "sha256": sha256(gguf)}
    rng = torch.Generator().manual_seed(1000 + seed)
    prompts = []
    for n in PROMPTS.get(name, PROMPT_LENGTHS):
        ids = torch.randint(3, VOCAB, (n,), generator=rng).tolist()
        prompts.append(dict(name=f"ids_{n}", **run(model, ids)))
    golden = {
        "generator": "tools/golden/hf_tiny/make_goldens.py",
        "architecture": hf_arch,
        "seed": seed,
        "files": files,
        "reference": {
            "transformers": importlib.metadata.version("transformers"),
            "torch": importlib.metadata.version("torch"),
            "dtype": "float32",
            "attn_implementation": "eager",
        },
        "config": config.to_diff_dict(),
        # What transformers' rotary embedding multiplies cos and sin by (LongRoPE: not 1).
        "rope_attention_scaling": float(getattr(getattr(model.model, "rotary_emb", None),
                                                "attention_scaling", 1.0)),
        "settings": {"n_new": N_NEW, "top_k": TOP_K,
                     "top": "at the last prompt position, then at each generated token"},
        "prompts": prompts,
    }
    with open(out_dir / "golden.json", "w") as f:
        json.dump(golden, f, indent=None, separators=(",", ":"))
        f.write("\n")


def copy_gguf(gguf, src: pathlib.Path, dst: pathlib.Path, keys=None, tensors=None) -> None:
    """src with keys[k] set (None: removed) and tensors[name] replaced (an (array, type) pair, or
    None: removed); new keys and tensors are added."""
    keys, tensors = dict(keys or {}), dict(tensors or {})
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        if field.name in keys:
            value = keys.pop(field.name)
            if value is not None:
                w.add_key_value(field.name, value[0], value[1])
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), field.types[0], sub)
    for key, value in keys.items():
        w.add_key_value(key, value[0], value[1])
    for t in r.tensors:
        data, qtype = tensors.pop(t.name) if t.name in tensors else (t.data, t.tensor_type)
        if data is not None:
            w.add_tensor(t.name, data, raw_dtype=qtype)
    for name, (data, qtype) in tensors.items():
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def add_keys(llama_cpp: pathlib.Path, path: pathlib.Path, keys: dict) -> None:
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf
    tmp = path.with_suffix(".tmp")
    copy_gguf(gguf, path, tmp,
              keys={k: (v, getattr(gguf.GGUFValueType, t)) for k, (v, t) in keys.items()})
    tmp.replace(path)


def experts_to_mxfp4(llama_cpp: pathlib.Path, path: pathlib.Path) -> None:
    """The F32 file at path with its ffn_*_exps.weight tensors in MXFP4 (gguf-py's quantizer)."""
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf
    q = gguf.GGMLQuantizationType.MXFP4
    r = gguf.GGUFReader(path)
    tensors = {}
    for t in r.tensors:
        if t.name.endswith("_exps.weight"):
            data = gguf.quants.quantize(t.data, q)
            assert (gguf.quants.dequantize(data, q) == t.data).all(), t.name
            tensors[t.name] = (data, q)
    tmp = path.with_suffix(".tmp")
    copy_gguf(gguf, path, tmp, tensors=tensors)
    tmp.replace(path)


def make_refused(llama_cpp: pathlib.Path, out_root: pathlib.Path) -> None:
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf
    import numpy as np
    base = out_root / "llama" / "llama-q8_0.gguf"
    r = gguf.GGUFReader(base)
    q8 = {t.name: t for t in r.tensors}
    up = gguf.quants.dequantize(q8["blk.0.ffn_up.weight"].data, gguf.GGMLQuantizationType.Q8_0)
    norm = np.array(q8["blk.0.attn_norm.weight"].data)
    norm[5] = np.nan
    scale_nan = np.array(q8["blk.1.attn_v.weight"].data)
    scale_nan[3, 34 * 1:34 * 1 + 2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)
    U32, STR, F32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.STRING, gguf.GGUFValueType.FLOAT32
    bias = np.zeros(128, np.float32)
    cases = {
        "unchanged": ({}, {}, ""),
        "bias": ({}, {"blk.0.attn_q.bias": (bias, gguf.GGMLQuantizationType.F32)},
                 "tensor blk.0.attn_q.bias"),
        "unknown_tensor": ({}, {"blk.0.attn_rot_embd": (bias, gguf.GGMLQuantizationType.F32)},
                           "tensor blk.0.attn_rot_embd"),
        "past_block_count": ({"llama.block_count": (1, U32)}, {}, "tensor blk.1."),
        "vocab_size": ({"llama.vocab_size": (100, U32)}, {}, "llama.vocab_size"),
        "sliding_window": ({"llama.attention.sliding_window": (1, U32)}, {},
                           "llama.attention.sliding_window"),
        "expert_count": ({"llama.expert_count": (4, U32)}, {}, "key llama.expert_count"),
        "rope_type": ({"llama.rope.scaling.type": ("longrope", STR),
                       "llama.rope.scaling.factor": (4.0, F32)}, {}, "llama.rope.scaling.type"),
        "f64_weight": ({}, {"blk.0.ffn_up.weight": (up.astype(np.float64), None)},
                       "tensor blk.0.ffn_up.weight"),
        "nan_norm": ({}, {"blk.0.attn_norm.weight": (norm, gguf.GGMLQuantizationType.F32)},
                     "tensor blk.0.attn_norm.weight"),
        "inf_scale": ({}, {"blk.1.attn_v.weight": (scale_nan, gguf.GGMLQuantizationType.Q8_0)},
                      "tensor blk.1.attn_v.weight"),
    }
    out_dir = out_root / "refused"
    out_dir.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, (keys, tensors, names) in cases.items():
        copy_gguf(gguf, base, out_dir / f"{name}.gguf", keys, tensors)
        expected[name] = {"names": names,
                          "id": "" if not names else "CTXPAR-GGUF-006"
                          if name in ("vocab_size", "rope_type", "sliding_window")
                          else "CTXPAR-MODEL-011"}
    with open(out_dir / "refused.json", "w") as f:
        json.dump({"generator": "tools/golden/hf_tiny/make_goldens.py", "base": base.name,
                   "cases": expected}, f, indent=1)
        f.write("\n")


def make_refused_deepseek(llama_cpp: pathlib.Path, out_root: pathlib.Path) -> None:
    """tests/data/hf_tiny/deepseek_refused/: copies of the deepseek_v3 Q8_0 file with one fault
    each, what ctxpar's deepseek2 source must refuse (refused.json as make_refused's)."""
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf
    import numpy as np
    base = out_root / "deepseek_v3" / "deepseek_v3-q8_0.gguf"
    r = gguf.GGUFReader(base)
    t = {x.name: x for x in r.tensors}
    bias = np.array(t["blk.1.exp_probs_b.bias"].data)
    bias[3] = np.nan
    # attn_k_b written without the converter's transpose: ne [kv_lora_rank, nope, heads].
    k_b = np.ascontiguousarray(np.array(t["blk.0.attn_k_b.weight"].data).transpose(0, 2, 1))
    U32, STR, F32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.STRING, gguf.GGUFValueType.FLOAT32
    Q = gguf.GGMLQuantizationType
    a = "deepseek2."
    cases = {
        "unchanged": ({}, {}, "", ""),
        # A file without the key is DeepSeek-V2's softmax router (as llama.cpp reads it), which
        # has no correction bias: V3's exp_probs_b is then a tensor nothing reads.
        "no_gating_func": ({a + "expert_gating_func": None}, {}, "tensor blk.1.exp_probs_b.bias",
                           "CTXPAR-MODEL-011"),
        "sqrtsoftplus_router": ({a + "expert_gating_func": (3, U32)}, {},
                                a + "expert_gating_func", "CTXPAR-GGUF-006"),
        "longrope": ({a + "rope.scaling.type": ("longrope", STR),
                      a + "rope.scaling.factor": (4.0, F32)},
                     {}, a + "rope.scaling.type", "CTXPAR-GGUF-006"),
        "yarn_no_context": ({a + "rope.scaling.type": ("yarn", STR),
                             a + "rope.scaling.factor": (4.0, F32)},
                            {}, a + "rope.scaling.original_context_length", "CTXPAR-GGUF-004"),
        # Without the key MLA has no q LoRA (V2-Lite's attn_q): attn_q_a* are then unread.
        "no_q_lora": ({a + "attention.q_lora_rank": None}, {},
                      "tensor blk.0.attn_q_a_norm.weight",
                      "CTXPAR-MODEL-011"),
        "group_count": ({a + "expert_group_count": (3, U32)}, {}, a + "expert_group_count",
                        "CTXPAR-GGUF-006"),
        "unread_key": ({a + "attention.sliding_window": (64, U32)}, {},
                       "key " + a + "attention.sliding_window", "CTXPAR-MODEL-011"),
        "kv_b_unsplit": ({}, {"blk.0.attn_kv_b.weight":
                              (np.zeros((128, 32), np.float32), Q.F32)},
                         "tensor blk.0.attn_kv_b.weight", "CTXPAR-MODEL-011"),
        "experts_in_dense_layer": ({}, {"blk.0.ffn_gate_exps.weight":
                                        (t["blk.1.ffn_gate_exps.weight"].data, Q.Q8_0)},
                                   "tensor blk.0.ffn_gate_exps.weight", "CTXPAR-MODEL-011"),
        "k_b_transposed": ({}, {"blk.0.attn_k_b.weight": (k_b, Q.F16)},
                           "tensor blk.0.attn_k_b.weight", "CTXPAR-MODEL-011"),
        "nan_bias": ({}, {"blk.1.exp_probs_b.bias": (bias, Q.F32)},
                     "tensor blk.1.exp_probs_b.bias", "CTXPAR-MODEL-011"),
    }
    out_dir = out_root / "deepseek_refused"
    out_dir.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, (keys, tensors, names, error_id) in cases.items():
        copy_gguf(gguf, base, out_dir / f"{name}.gguf", keys, tensors)
        expected[name] = {"names": names, "id": error_id}
    with open(out_dir / "refused.json", "w") as f:
        json.dump({"generator": "tools/golden/hf_tiny/make_goldens.py", "base": base.name,
                   "cases": expected}, f, indent=1)
        f.write("\n")


def make_refused_gpt_oss(llama_cpp: pathlib.Path, out_root: pathlib.Path) -> None:
    """tests/data/hf_tiny/gpt_oss_refused/: copies of the gpt_oss_mxfp4 file with one fault each
    (refused.json as make_refused's). Every fault is refused before a layer's weight is read, so
    the copies keep token_embd alone (its rows are the vocabulary's size; the whole file is the
    golden, which opens), but nan_scale, which keeps layer 0 for its expert matrix."""
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf
    import numpy as np
    base = out_root / "gpt_oss_mxfp4" / "gpt_oss_mxfp4-mxfp4.gguf"
    r = gguf.GGUFReader(base)
    t = {x.name: x for x in r.tensors}
    up = np.array(t["blk.0.ffn_up_exps.weight"].data)
    up.reshape(-1, 17)[5, 0] = 0xFF  # block 5's E8M0 exponent: OCP's NaN
    weights = {name: (None, None) for name in t if name != "token_embd.weight"}
    layer0 = {name: v for name, v in weights.items() if not name.startswith("blk.0.")}
    U32, F32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32
    Q = gguf.GGMLQuantizationType
    a = "gpt-oss."
    cases = {
        # llama.cpp reads a separate RoPE base of the window layers; ctxpar runs one base.
        "freq_base_swa": ({a + "rope.freq_base_swa": (1e4, F32)}, {},
                          "key " + a + "rope.freq_base_swa", "CTXPAR-MODEL-011"),
        "gating_func": ({a + "expert_gating_func": (1, U32)}, {},
                        "key " + a + "expert_gating_func", "CTXPAR-MODEL-011"),
        # One layer would leave the global KV group empty.
        "one_layer": ({a + "block_count": (1, U32)}, {}, a + "block_count", "CTXPAR-GGUF-006"),
        "window_of_one": ({a + "attention.sliding_window": (1, U32)}, {},
                          a + "attention.sliding_window", "CTXPAR-GGUF-006"),
        "unread_tensor": ({}, {"blk.0.ffn_norm.weight": (np.ones(64, np.float32), Q.F32)},
                          "tensor blk.0.ffn_norm.weight", "CTXPAR-MODEL-011"),
        "nan_scale": ({}, dict(layer0, **{"blk.0.ffn_up_exps.weight": (up, Q.MXFP4)}),
                      "tensor blk.0.ffn_up_exps.weight", "CTXPAR-MODEL-011"),
    }
    out_dir = out_root / "gpt_oss_refused"
    out_dir.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, (keys, tensors, names, error_id) in cases.items():
        kept = tensors if name == "nan_scale" else dict(weights, **tensors)
        copy_gguf(gguf, base, out_dir / f"{name}.gguf", keys, kept)
        expected[name] = {"names": names, "id": error_id}
    with open(out_dir / "refused.json", "w") as f:
        json.dump({"generator": "tools/golden/hf_tiny/make_goldens.py", "base": base.name,
                   "cases": expected}, f, indent=1)
        f.write("\n")


# Fixed per name, so that adding an architecture changes no other golden (qwen2_yarn's 9 gave a
# top-2 margin of 3e-4, under the tests' logit tolerance).
SEEDS = {"llama": 0, "llama3": 1, "qwen2": 2, "qwen3": 3, "phi3": 4, "llama_linear": 5,
         "gemma2": 6, "olmo2": 7, "phi3_longrope": 8, "qwen2_yarn": 10,
         "qwen3moe": 11, "deepseek_v3": 12, "mistral": 20, "ministral3": 21, "phi3_window": 22,
         "deepseek_v3_yarn": 23, "deepseek_v2": 24, "gpt_oss": 30, "gpt_oss_mxfp4": 31}


def main() -> None:
    llama_cpp = pathlib.Path(sys.argv[1]).expanduser().resolve()
    out_root = pathlib.Path(sys.argv[2])
    names = sys.argv[3:] or list(ARCHS)
    torch.set_num_threads(2)
    for name in names:
        if name in ARCHS:
            make(name, llama_cpp, out_root, SEEDS[name])
    if "refused" in names or not sys.argv[3:]:
        make_refused(llama_cpp, out_root)
    if "deepseek_refused" in names or not sys.argv[3:]:
        make_refused_deepseek(llama_cpp, out_root)
    if "gpt_oss_refused" in names or not sys.argv[3:]:
        make_refused_gpt_oss(llama_cpp, out_root)


if __name__ == "__main__":
    main()
