"""Writes the tiny GGUF fixtures with llama.cpp's own Python writer (the `gguf` package).

External goldens for vkllm-gguf: tests/gguf_fixtures.rs reads them with our reader and
rebuilds them byte-for-byte with our writer. Run from this directory:
    pip install gguf numpy && python make_gguf_fixtures.py
(made with gguf 0.19.0, numpy 2.4.6). Keep the values here and in the test in sync.
"""
import numpy as np
import gguf


def common(w):
    w.add_string("general.name", "tiny")
    w.add_uint32("llama.context_length", 2048)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_int32("test.i32", -7)
    w.add_uint64("test.u64", 1 << 40)
    w.add_int64("test.i64", -(1 << 40))
    w.add_float64("test.f64", 0.125)
    w.add_bool("test.bool", True)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello", "w\u00f6rld", "\u2581a"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.0, -2.5, -3.25, 0.5])
    w.add_array("tokenizer.ggml.token_type", [3, 3, 1, 1, 1])
    w.add_array("tokenizer.ggml.merges", ["h e", "l l"])
    w.add_array("test.nested", [[1, 2], [3]])
    w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}\n{% endfor %}")
    # numpy shapes are reversed ggml dims: (3, 8) is ne0=8, ne1=3.
    w.add_tensor("token_embd.weight", np.arange(24, dtype=np.float32).reshape(3, 8))
    w.add_tensor("blk.0.attn_q.weight", (np.arange(64, dtype=np.float16) / 4).reshape(2, 32))
    q8 = (np.arange(68) % 251).astype(np.uint8).reshape(2, 34)  # 2 rows of one Q8_0 block
    w.add_tensor("blk.0.ffn_down.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def write(path, alignment=None):
    w = gguf.GGUFWriter(path, arch="llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    common(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


write("gguf_py_default_align.gguf")
write("gguf_py_align64.gguf", alignment=64)
