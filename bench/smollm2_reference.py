"""Independent reference numbers for credit-train's GGUF path, on SmolLM2-135M-Instruct.Q4_1.gguf.

Nothing here is credit's code: the file is read with the PyPI `gguf` package (its own
dequantisation), the tokenizer is a plain-Python byte-level BPE over the file's vocabulary and
merges, and the forward pass is numpy in float64 in llama.cpp's basis (the q/k rows as the
converter permuted them, RoPE rotating adjacent pairs), so credit's un-permutation and
Hugging Face-style RoPE are checked, not copied.

    python -m venv /tmp/ref && /tmp/ref/bin/pip install gguf numpy regex
    /tmp/ref/bin/python bench/smollm2_reference.py MODEL.gguf fixtures/smollm2

writes `tokens.json` (ids of texts of fixtures/real/*.jsonl, referenced by file, line and field,
plus a few edge cases) and `forward.json` (per prompt: ids, every next token's log-prob, the
top logits at the last position, and a greedy continuation), read by
crates/train/tests/smollm2.rs.
"""

import json
import sys
from pathlib import Path

import gguf
import numpy as np
import regex

# tokenizers' ByteLevel split (GPT-2's pattern, plus `\s+` for whitespace before a non-space),
# after llama.cpp's `smollm` pre-split isolating each `\p{N}`.
GPT2_SPLIT = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
DIGIT = regex.compile(r"\p{N}")

# Fixture rows whose texts are tokenized: every 29th line of each file, both fields.
LINE_STRIDE = 29
EDGE_CASES = [
    "Hello, world! It's 2024-05-17; I'll pay $3.50 (or 12345 credits).",
    "  leading and   inner   spaces\n\n\ttabs\r\nand trailing  ",
    "café naïve — “quotes” 日本語 😀 ñ",
    "<|im_start|>user\ngo north<|im_end|>\n<|im_start|>assistant\n",
    "\\boxed{right}",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Bpe:
    def __init__(self, reader):
        fields = reader.fields
        self.tokens = [str(t) for t in fields["tokenizer.ggml.tokens"].contents()]
        types = fields["tokenizer.ggml.token_type"].contents()
        merges = fields["tokenizer.ggml.merges"].contents()
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
        self.special = [t for t, k in zip(self.tokens, types) if k == 3]
        self.byte = bytes_to_unicode()
        self.cache = {}

    def word(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        parts = [self.byte[b] for b in piece.encode("utf-8")]
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), None), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            ranked = [(r, i) for r, i in pairs if r is not None]
            if not ranked:
                break
            _, i = min(ranked)
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2 :]
        ids = [self.ids[p] for p in parts]
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        out = []
        pattern = "(" + "|".join(regex.escape(s) for s in sorted(self.special, key=len, reverse=True)) + ")"
        for chunk in regex.split(pattern, text):
            if chunk in self.ids and chunk in self.special:
                out.append(self.ids[chunk])
                continue
            pieces = []
            at = 0
            for m in DIGIT.finditer(chunk):
                pieces += [chunk[at : m.start()], m.group()]
                at = m.end()
            pieces.append(chunk[at:])
            for p in pieces:
                for w in GPT2_SPLIT.findall(p):
                    out += self.word(w)
        return out

    def decode(self, ids):
        inverse = {c: b for b, c in self.byte.items()}
        text = "".join(self.tokens[i] for i in ids)
        return bytes(inverse[c] for c in text if c in inverse).decode("utf-8", errors="replace")


class Llama:
    """llama.cpp's LLM_ARCH_LLAMA graph (rope type NORM) in float64 numpy."""

    def __init__(self, reader):
        f = reader.fields
        get = lambda k: f[k].contents()
        self.layers = get("llama.block_count")
        self.heads = get("llama.attention.head_count")
        self.kv_heads = get("llama.attention.head_count_kv")
        self.base = get("llama.rope.freq_base")
        self.eps = get("llama.attention.layer_norm_rms_epsilon")
        self.w = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64) for t in reader.tensors}
        self.head = self.w.get("output.weight", self.w["token_embd.weight"])

    def norm(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def rope(self, x):
        # x [T, heads, d]: pairs (2i, 2i+1) rotated by pos·base^(−2i/d).
        t, _, d = x.shape
        theta = np.arange(t)[:, None] * self.base ** (-np.arange(0, d, 2) / d)[None, :]
        cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def logits(self, ids, last_only=False):
        h = self.w["token_embd.weight"][ids]
        t = len(ids)
        for l in range(self.layers):
            w = lambda n: self.w[f"blk.{l}.{n}.weight"]
            x = self.norm(h, w("attn_norm"))
            q = (x @ w("attn_q").T).reshape(t, self.heads, -1)
            k = (x @ w("attn_k").T).reshape(t, self.kv_heads, -1)
            v = (x @ w("attn_v").T).reshape(t, self.kv_heads, -1)
            q, k = self.rope(q), self.rope(k)
            d = q.shape[-1]
            group = self.heads // self.kv_heads
            out = np.empty_like(q)
            mask = np.triu(np.full((t, t), -np.inf), 1)
            for hh in range(self.heads):
                kv = hh // group
                s = q[:, hh] @ k[:, kv].T / np.sqrt(d) + mask
                p = np.exp(s - s.max(-1, keepdims=True))
                p /= p.sum(-1, keepdims=True)
                out[:, hh] = p @ v[:, kv]
            h = h + out.reshape(t, -1) @ w("attn_output").T
            x = self.norm(h, w("ffn_norm"))
            g = x @ w("ffn_gate").T
            h = h + ((g / (1 + np.exp(-g))) * (x @ w("ffn_up").T)) @ w("ffn_down").T
        if last_only:
            h = h[-1:]
        return self.norm(h, self.w["output_norm.weight"]) @ self.head.T


def chat(body):
    # ChatFormat::wrap_user: one user turn, the assistant's turn opened.
    return f"<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"


def main(model, out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    reader = gguf.GGUFReader(model)
    bpe = Bpe(reader)
    root = Path(__file__).resolve().parent.parent
    texts = []
    for name in ["textworld.jsonl", "sokoban.jsonl"]:
        lines = (root / "fixtures" / "real" / name).read_text().splitlines()
        for n in range(0, len(lines), LINE_STRIDE):
            row = json.loads(lines[n])
            for field in ["anchor_obs", "action"]:
                texts.append({"file": f"fixtures/real/{name}", "line": n + 1, "field": field,
                              "ids": bpe.encode(row[field])})
    for text in EDGE_CASES:
        texts.append({"text": text, "ids": bpe.encode(text)})
    (out / "tokens.json").write_text(json.dumps({"model": Path(model).name, "texts": texts}) + "\n")

    llama = Llama(reader)
    tw = json.loads((root / "fixtures/real/textworld.jsonl").read_text().splitlines()[5])
    prompts = [
        chat("What is the capital of France?"),
        chat("Give me three tips for staying healthy."),
        chat(tw["anchor_obs"][-300:] + "\nWhat do you do next?") + tw["action"],
    ]
    results = []
    for prompt in prompts:
        ids = bpe.encode(prompt)
        logits = llama.logits(ids)
        logp = logits - logits.max(-1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
        next_logprobs = [float(logp[i, ids[i + 1]]) for i in range(len(ids) - 1)]
        last = logits[-1]
        top = np.argsort(-last)[:20]
        greedy = []
        seq = list(ids)
        for _ in range(24):
            nxt = int(np.argmax(llama.logits(seq, last_only=True)[-1]))
            greedy.append(nxt)
            seq.append(nxt)
            if nxt == bpe.ids["<|im_end|>"]:
                break
        results.append({
            "prompt": prompt, "ids": ids, "next_logprobs": next_logprobs,
            "top_ids": [int(i) for i in top], "top_logits": [float(last[i]) for i in top],
            "greedy_ids": greedy, "greedy_text": bpe.decode(greedy),
        })
        print(repr(prompt[-60:]), "->", repr(bpe.decode(greedy)), file=sys.stderr)
    (out / "forward.json").write_text(json.dumps({"model": Path(model).name, "prompts": results}) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
