#!/usr/bin/env python3
"""Cross-check for docs/perplexity.md: transformers loads the same GGUF files (dequantized to
fp32) and scores the same token ids (from `vkllm tokenize --plain`, i.e. what `vkllm
perplexity` scores) by llama.cpp's method: chunks of CTX tokens from an empty cache, the first
token of each replaced by BOS when the tokenizer adds one, the second half of each chunk scored,
PPL = exp(mean NLL) +/- PPL * sqrt(var(NLL) / (n - 1)).

Run after scripts/fetch-models.sh, with the vkllm binary built:
    python3 docs/data/perplexity_transformers.py [CTX ...]     (default 256 128)
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

HERE = Path(__file__).resolve().parent
TEXT = (HERE / "perplexity.txt").read_text()
CACHE = Path(os.environ.get("VKLLM_CACHE", Path.home() / ".cache" / "vkllm"))
VKLLM = os.environ.get("VKLLM_BIN", "vkllm")
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "qwen25coder": "qwen2.5-coder-0.5b-instruct-q4.gguf",
}


@torch.no_grad()
def ppl(model, ids, ctx, bos):
    nll = []
    for c in range(len(ids) // ctx):
        chunk = list(ids[c * ctx:(c + 1) * ctx])
        if bos is not None:
            chunk[0] = bos
        logits = model(input_ids=torch.tensor([chunk]), use_cache=False).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        for j in range(ctx // 2, ctx - 1):
            nll.append(-float(logp[j, chunk[j + 1]]))
    n = len(nll)
    mean = sum(nll) / n
    var = sum(x * x for x in nll) / n - mean * mean
    p = math.exp(mean)
    return p, p * math.sqrt(var / (n - 1)), n


def main():
    ctxs = [int(a) for a in sys.argv[1:]] or [256, 128]
    for name, file in MODELS.items():
        path = CACHE / "models" / file
        out = subprocess.run([VKLLM, "tokenize", "--plain", "--model", name, TEXT],
                             check=True, capture_output=True, text=True).stdout
        ids = json.loads(out)
        tok_info = subprocess.run([VKLLM, "tokenize", "--plain", "--model", name, ""],
                                  check=True, capture_output=True, text=True).stdout
        empty = json.loads(tok_info)
        bos = empty[0] if empty and ids and ids[0] == empty[0] else None
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                     dtype=torch.float32)
        model.eval()
        for ctx in ctxs:
            p, e, n = ppl(model, ids, ctx, bos)
            print(f"{name} ctx {ctx}: PPL = {p:.4f} +/- {e:.5f} ({n} tokens, bos {bos})",
                  flush=True)


if __name__ == "__main__":
    main()
