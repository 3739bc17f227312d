#!/usr/bin/env python3
"""Writes the small committed seed corpus for the fuzz targets (deterministic).

gguf_open: GGUF files from the `gguf` package's writer with every metadata value type, nested
and string arrays, and tensors in several ggml types. safetensors_open: files from the
`safetensors` package plus hand-made headers that lie (sizes, offsets, dtypes, JSON).
"""
import json
import os
import struct

import numpy as np
import gguf
from safetensors.numpy import save

HERE = os.path.dirname(os.path.abspath(__file__))
T = gguf.GGMLQuantizationType


def gguf_seeds(out):
    rng = np.random.default_rng(1)
    specs = [
        ("meta_only", []),
        ("f32_f16", [("a", np.float32, None), ("b", np.float16, None)]),
        ("quant", [("q8", np.float32, T.Q8_0), ("q4", np.float32, T.Q4_0),
                   ("q41", np.float32, T.Q4_1), ("q5", np.float32, T.Q5_0),
                   ("bf", np.float32, T.BF16)]),
    ]
    for name, tensors in specs:
        path = os.path.join(out, name + ".gguf")
        w = gguf.GGUFWriter(path, "llama")
        w.add_uint32("llama.block_count", 2)
        w.add_float32("llama.rope.freq_base", 10000.0)
        w.add_string("general.name", "seed")
        w.add_bool("b", True)
        w.add_int64("i64", -5)
        w.add_float64("f64", 0.5)
        w.add_array("tokenizer.ggml.tokens", ["a", "bc", ""])
        w.add_array("ints", [1, 2, 3])
        w.add_array("nested", [[1, 2], [3]])
        for tname, dt, q in tensors:
            x = rng.standard_normal((2, 64)).astype(np.float32)
            if q is None:
                w.add_tensor(tname, x.astype(dt))
            else:
                w.add_tensor(tname, gguf.quants.quantize(x, q), raw_dtype=q)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def raw_st(path, header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def st_seeds(out):
    rng = np.random.default_rng(2)
    valid = save({"w": rng.standard_normal((3, 4)).astype(np.float32),
                  "h": np.arange(6, dtype=np.float16).reshape(2, 3),
                  "i": np.arange(2, dtype=np.int64)}, metadata={"format": "pt"})
    with open(os.path.join(out, "valid.safetensors"), "wb") as f:
        f.write(valid)
    # bf16 via raw header (numpy has no bfloat16).
    raw_st(os.path.join(out, "bf16.safetensors"),
           {"b": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, b"\x80\x3f\x00\x40")
    raw_st(os.path.join(out, "size_lie.safetensors"),
           {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}, bytes(12))
    raw_st(os.path.join(out, "offset_past_end.safetensors"),
           {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(4))
    raw_st(os.path.join(out, "overflow_shape.safetensors"),
           {"w": {"dtype": "F32", "shape": [2**64 - 1, 2], "data_offsets": [0, 4]}}, bytes(4))
    raw_st(os.path.join(out, "empty_header.safetensors"), {}, b"")
    with open(os.path.join(out, "truncated.safetensors"), "wb") as f:
        f.write(valid[: len(valid) // 2])


def main():
    g = os.path.join(HERE, "seeds", "gguf_open")
    s = os.path.join(HERE, "seeds", "safetensors_open")
    os.makedirs(g, exist_ok=True)
    os.makedirs(s, exist_ok=True)
    gguf_seeds(g)
    st_seeds(s)


if __name__ == "__main__":
    main()
