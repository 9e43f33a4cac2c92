#!/usr/bin/env python3
"""Builds the GGUF fixtures and dequantization goldens of tests/data/gguf/ with gguf-py.

The references are gguf-py's (the GGUF library of llama.cpp): its GGUFWriter writes the fixture
files, its GGUFReader reads them back (and the real model), and gguf.quants.dequantize produces
every float the tests compare against. Nothing here reimplements a block format.

Usage (outside the repository's build, in a throwaway venv):
    python3 -m venv /tmp/gguf-venv && /tmp/gguf-venv/bin/pip install gguf numpy
    /tmp/gguf-venv/bin/python tools/golden/gguf/make_goldens.py [--model PATH]

--model (default: $CTXPAR_MODEL) adds the expectations for SmolLM2-135M-Instruct.Q4_1.gguf:
its metadata, every tensor's name, type and shape, and a few dequantized rows. Everything is
seeded, so a rerun with the same gguf-py and numpy rewrites identical files.
"""

import argparse
import importlib.metadata
import json
import os
import struct
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

OUT = Path(__file__).resolve().parents[3] / "tests" / "data" / "gguf"
SEED = 20261130

# Byte ranges of the fp16 scale fields inside one block (ggml-common.h); they are drawn finite.
HALF_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
    Q.IQ4_NL: [0], Q.IQ4_XS: [0], Q.MXFP4: [],
}
# Byte offsets of E8M0 exponents (MXFP4's d = 2^(e - 128)): drawn below 253, where d * 12 is
# still finite.
E8M0_FIELDS = {Q.MXFP4: [0]}
# Types are appended: each draws from the stream after the ones before it.
BLOCK_TYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K,
               Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4]
TYPE_NAMES = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32",
              V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string",
              V.UINT64: "u64", V.INT64: "i64", V.FLOAT64: "f64"}


def random_blocks(rng, qtype, n_blocks):
    """Random bytes with finite fp16 (or E8M0) scales: every quant bit pattern, no inf/NaN scale."""
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in HALF_FIELDS[qtype]:
        halves = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = halves.view(np.uint8).reshape(n_blocks, 2)
    for off in E8M0_FIELDS.get(qtype, []):
        raw[:, off] = rng.integers(0, 253, size=n_blocks, dtype=np.uint8)
    return raw


def special_halves(rng, n):
    """Random finite fp16 bits plus subnormals, zeros, infinities, max and NaN."""
    bits = rng.integers(0, 0x7C00, size=n, dtype=np.uint16) | (
        rng.integers(0, 2, size=n, dtype=np.uint16) << 15)
    specials = [0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
                0x7E00, 0x7C01, 0x3C00, 0xBC00, 0x3555]
    bits[:len(specials)] = specials
    return bits


def write_blocks():
    """blocks_<TYPE>.bin holds raw rows, blocks_<TYPE>.f32 gguf-py's dequantization of them."""
    rng = np.random.default_rng(SEED)
    entries = []

    def emit(name, raw, golden, n):
        (OUT / f"blocks_{name}.bin").write_bytes(raw.tobytes())
        (OUT / f"blocks_{name}.f32").write_bytes(golden.astype("<f4").tobytes())
        entries.append({"type": name, "n": int(n), "input": f"blocks_{name}.bin",
                        "golden": f"blocks_{name}.f32"})

    n = 2048
    f32 = (rng.standard_normal(n) * 10).astype(np.float32)
    emit("F32", f32.view(np.uint8), gguf.quants.dequantize(f32.view(np.uint8), Q.F32), n)
    f16 = special_halves(rng, n)
    emit("F16", f16.view(np.uint8), gguf.quants.dequantize(f16.view(np.uint8), Q.F16), n)
    bf16 = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    bf16[:4] = [0x7F80, 0xFF80, 0x0001, 0x8000]  # inf, -inf, subnormal, -0
    emit("BF16", bf16.view(np.uint8), gguf.quants.dequantize(bf16.view(np.uint8), Q.BF16), n)
    for qtype in BLOCK_TYPES:
        block_size, _ = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = n // block_size
        raw = random_blocks(rng, qtype, n_blocks)
        golden = gguf.quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1)
        assert golden.size == n and np.all(np.isfinite(golden)), qtype.name
        emit(qtype.name, raw, golden, n)
    return entries


# Metadata of every GGUF value type, scalars and arrays (nested arrays included).
def fixture_metadata():
    f32 = lambda x: float(np.float32(x))  # noqa: E731  values the file stores exactly
    return [
        ("test.u8", V.UINT8, 200, None),
        ("test.i8", V.INT8, -100, None),
        ("test.u16", V.UINT16, 65000, None),
        ("test.i16", V.INT16, -32000, None),
        ("test.u32", V.UINT32, 4000000000, None),
        ("test.i32", V.INT32, -2000000000, None),
        ("test.f32", V.FLOAT32, f32(3.14159), None),
        ("test.bool_true", V.BOOL, True, None),
        ("test.bool_false", V.BOOL, False, None),
        ("test.string", V.STRING, "h\u00e9llo, \u4e16\u754c \U0001F600", None),
        ("test.empty_string", V.STRING, "", None),
        ("test.u64", V.UINT64, 18000000000000000000, None),
        ("test.i64", V.INT64, -9000000000000000000, None),
        ("test.f64", V.FLOAT64, -2.718281828459045e-300, None),
        ("test.array.u8", V.ARRAY, [0, 1, 255], V.UINT8),
        ("test.array.i8", V.ARRAY, [-128, 0, 127], V.INT8),
        ("test.array.u16", V.ARRAY, [0, 65535], V.UINT16),
        ("test.array.i16", V.ARRAY, [-32768, 32767], V.INT16),
        ("test.array.u32", V.ARRAY, [1, 2, 4294967295], V.UINT32),
        ("test.array.i32", V.ARRAY, [-2147483648, 0, 2147483647], V.INT32),
        ("test.array.f32", V.ARRAY, [f32(0.1), f32(-1e-30), f32(6.5e37)], V.FLOAT32),
        ("test.array.bool", V.ARRAY, [True, False, True], V.BOOL),
        ("test.array.string", V.ARRAY, ["<s>", "", "\u0120the", "a b"], V.STRING),
        ("test.array.u64", V.ARRAY, [0, 18446744073709551615], V.UINT64),
        ("test.array.i64", V.ARRAY, [-9223372036854775808, 9223372036854775807], V.INT64),
        ("test.array.f64", V.ARRAY, [1e300, -0.5, 5e-324], V.FLOAT64),
        ("test.array.nested", V.ARRAY, [[1, 2], [3, 4, 5]], None),
    ]


def type_name(vtype, value, sub_type):
    if vtype != V.ARRAY:
        return TYPE_NAMES[vtype]
    if sub_type is not None:
        return f"array[{TYPE_NAMES[sub_type]}]"
    inner = gguf.GGUFValueType.get_type(value[0])
    return f"array[{type_name(inner, value[0], None)}]"


def build_fixture(path, tensors, alignment=None):
    writer = gguf.GGUFWriter(str(path), "testarch")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for key, vtype, value, sub_type in fixture_metadata():
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    for name, data, raw_dtype in tensors:
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def fixture_tensors(rng):
    """(name, numpy data, raw ggml type or None) across types, ranks and quantizers."""
    def quantized(qtype, shape):
        return gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), qtype)

    def raw_rows(qtype, rows, ne0):
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        return random_blocks(rng, qtype, rows * ne0 // block_size).reshape(rows, -1)

    return [
        ("f32.vector", rng.standard_normal(64).astype(np.float32), None),
        ("f16.matrix", rng.standard_normal((3, 32)).astype(np.float16), None),
        ("bf16.matrix", quantized(Q.BF16, (2, 16)), Q.BF16),
        ("q8_0.matrix", quantized(Q.Q8_0, (4, 64)), Q.Q8_0),
        ("q4_0.matrix", quantized(Q.Q4_0, (2, 64)), Q.Q4_0),
        ("q4_1.matrix", quantized(Q.Q4_1, (3, 96)), Q.Q4_1),
        ("q5_0.matrix", quantized(Q.Q5_0, (2, 32)), Q.Q5_0),
        ("q5_1.matrix", quantized(Q.Q5_1, (2, 32)), Q.Q5_1),
        ("q2_k.matrix", raw_rows(Q.Q2_K, 2, 256), Q.Q2_K),
        ("q3_k.matrix", raw_rows(Q.Q3_K, 2, 256), Q.Q3_K),
        ("q4_k.matrix", raw_rows(Q.Q4_K, 2, 512), Q.Q4_K),
        ("q5_k.matrix", raw_rows(Q.Q5_K, 1, 256), Q.Q5_K),
        ("q6_k.matrix", raw_rows(Q.Q6_K, 3, 256), Q.Q6_K),
        ("f32.rank3", rng.standard_normal((2, 3, 8)).astype(np.float32), None),
        ("i32.ids", np.arange(10, dtype=np.int32), None),
    ]


def describe(path, golden_name):
    """What gguf-py's reader sees in a fixture, plus its dequantization of every tensor."""
    reader = gguf.GGUFReader(str(path))
    written = {k: (vt, v, st) for k, vt, v, st in fixture_metadata()}
    metadata = []
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        entry = {"key": field.name}
        if field.name in written:
            vtype, value, sub_type = written[field.name]
            if field.name != "test.array.nested":  # gguf-py's reader flattens nested arrays
                assert field.contents() == value, (field.name, field.contents(), value)
            entry.update(type=type_name(vtype, value, sub_type), value=value)
        else:
            entry.update(type=TYPE_NAMES[field.types[0]], value=field.contents())
        metadata.append(entry)
    goldens = []
    tensors = []
    for t in reader.tensors:
        info = {"name": t.name, "type": t.tensor_type.name,
                "shape": [int(x) for x in t.shape], "offset": int(t.data_offset),
                "nbytes": int(t.n_bytes)}
        if t.tensor_type != Q.I32:
            values = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)
            info["golden_first"] = sum(len(g) for g in goldens)
            goldens.append(values.astype("<f4"))
        tensors.append(info)
    (OUT / golden_name).write_bytes(np.concatenate(goldens).tobytes())
    version = struct.unpack_from("<I", path.read_bytes(), 4)[0]
    alignment = int(reader.alignment)
    return {"file": path.name, "version": version, "alignment": alignment,
            "data_offset": int(reader.data_offset), "tensor_data": golden_name,
            "metadata": metadata, "tensors": tensors}


def write_fixtures():
    rng = np.random.default_rng(SEED + 1)
    tensors = fixture_tensors(rng)
    # ".bin": the repository ignores *.gguf to keep model files out.
    v3 = OUT / "fixture_v3.gguf.bin"
    build_fixture(v3, tensors)
    # Version 2 differs from 3 only in allowing big-endian files, so a little-endian v3 image
    # with its version field set to 2 is a valid v2 file.
    v2 = OUT / "fixture_v2_align64.gguf.bin"
    build_fixture(v2, tensors[:6], alignment=64)
    image = bytearray(v2.read_bytes())
    struct.pack_into("<I", image, 4, 2)
    v2.write_bytes(bytes(image))
    return [describe(v3, "fixture_v3.f32"), describe(v2, "fixture_v2_align64.f32")]


def describe_model(path):
    reader = gguf.GGUFReader(str(path))
    fields = reader.fields
    scalars = {}
    for name, field in fields.items():
        if name.startswith("GGUF.") or field.types[0] == V.ARRAY:
            continue
        scalars[name] = {"type": TYPE_NAMES[field.types[0]], "value": field.contents()}
    arrays = {}
    for name in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        field = fields[name]
        values = field.contents()
        arrays[name] = {"type": f"array[{TYPE_NAMES[field.types[-1]]}]", "size": len(values),
                        "first": values[:8], "last": values[-3:]}
    tensors = [{"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in t.shape],
                "offset": int(t.data_offset), "nbytes": int(t.n_bytes)} for t in reader.tensors]
    by_name = {t.name: t for t in reader.tensors}
    rows = []
    for name, row in (("blk.0.attn_q.weight", 0), ("blk.0.attn_q.weight", 575),
                      ("blk.29.ffn_down.weight", 300), ("token_embd.weight", 1234),
                      ("output_norm.weight", 0)):
        t = by_name[name]
        data = t.data if len(t.shape) == 1 else t.data[row]
        values = gguf.quants.dequantize(data, t.tensor_type).reshape(-1)
        rows.append({"tensor": name, "row": row,
                     "values": [float(v) for v in values.astype(np.float32)]})
    return {"file": path.name, "size": path.stat().st_size, "version":
            int(fields["GGUF.version"].contents()), "alignment": int(reader.alignment),
            "data_offset": int(reader.data_offset), "metadata_count": len(fields) - 3,
            "scalars": scalars, "arrays": arrays, "tensors": tensors, "rows": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.environ.get("CTXPAR_MODEL"))
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = {"generator": f"gguf-py {importlib.metadata.version('gguf')}, "
                             f"numpy {np.__version__}, seed {SEED}",
                "blocks": write_blocks(), "fixtures": write_fixtures()}
    if args.model:
        model = describe_model(Path(args.model))
        (OUT / "model_golden.json").write_text(json.dumps(model, indent=1, ensure_ascii=False))
    (OUT / "golden.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
