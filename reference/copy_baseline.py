#!/usr/bin/env python3
"""Vanilla-transformer baseline for the copy drills (docs/demo.md, "Copy drills").

Trains a plain pre-norm decoder (RMSNorm, full RoPE, SwiGLU, AdamW; no MoE, no MTP, no
hyper-connections, no compression) on the same drill documents, with the same tokenizer, rows
(8 x 256 tokens, documents packed with [BOS] text [EOS] and attention masked per document) and
schedule (linear warm-up 20 steps, cosine to 3e-4) as the `trex train` drill runs, and prints
the teacher-forced copy probe of reference/copy_probe.py (the same 40 drills, the same
value-token accuracy) every --probe-every steps. It answers one question: does the V4 model learn
the copy slower than an ordinary transformer of its size would?

  reference/.venv/bin/python reference/copy_baseline.py --tokenizer OUT/tokenizer.json \
      --train DRILLS_TRAIN.jsonl --drills DRILLS_VAL.jsonl [--steps 200] [--qk-norm-scale 0]

--qk-norm-scale S > 0 normalises q and k per head to unit RMS (no weight) and scales the scores
by S/sqrt(head_dim), as V4 does with S = 1 (its k has a learned RMSNorm weight instead).
Prints one JSON line per probe: step, training loss, value_accuracy (%), seconds.
"""
import argparse
import json
import math
import os
import random
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from copy_probe import encode, is_space_token, probe_cases  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trex", default="build/trex")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--train", required=True, help='{"text"} lines to train on')
    p.add_argument("--drills", required=True, help="drills of unseen problems for the probe")
    p.add_argument("--count", type=int, default=40)
    p.add_argument("--probe-seed", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr", type=float, default=3e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--qk-norm-scale", type=float, default=0.0)
    p.add_argument("--probe-every", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        d = a.hidden
        self.heads, self.head_dim, self.qk_scale = a.heads, d // a.heads, a.qk_norm_scale
        self.attn_norm = nn.RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.ffn_norm = nn.RMSNorm(d)
        self.w1 = nn.Linear(d, 3 * d, bias=False)
        self.w3 = nn.Linear(d, 3 * d, bias=False)
        self.w2 = nn.Linear(3 * d, d, bias=False)

    def rope(self, t, cos, sin):
        half = self.head_dim // 2
        t1, t2 = t[..., :half], t[..., half:]
        return torch.cat([t1 * cos - t2 * sin, t1 * sin + t2 * cos], -1)

    def forward(self, x, mask, cos, sin):
        B, S, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(B, S, 3, self.heads, self.head_dim).permute(
            2, 0, 3, 1, 4)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        scale = None
        if self.qk_scale > 0:
            q = F.rms_norm(q, (self.head_dim,))
            k = F.rms_norm(k, (self.head_dim,))
            scale = self.qk_scale / math.sqrt(self.head_dim)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        x = x + self.out(y.transpose(1, 2).reshape(B, S, d))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    def __init__(self, a, vocab):
        super().__init__()
        self.head_dim = a.hidden // a.heads
        self.embed = nn.Embedding(vocab, a.hidden)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = nn.RMSNorm(a.hidden)
        self.head = nn.Linear(a.hidden, vocab, bias=False)
        for w in self.parameters():
            if w.dim() == 2:
                nn.init.normal_(w, std=0.02)  # the demo config's initializer_range

    def forward(self, ids, positions, segments):
        half = self.head_dim // 2
        inv_freq = 1.0 / (10000 ** (torch.arange(half) / half))
        angle = positions[:, None, :, None].float() * inv_freq
        S = ids.shape[1]
        causal = torch.tril(torch.ones(S, S, dtype=torch.bool))
        mask = (causal[None] & (segments[:, :, None] == segments[:, None, :]))[:, None]
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, mask, angle.cos(), angle.sin())
        return self.head(self.norm(x))


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tok = json.load(open(a.tokenizer))
    vocab = {v: k for k, v in tok["model"]["vocab"].items()}
    specials = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    bos = specials.get("<｜begin▁of▁sentence｜>", 0)
    eos = specials.get("<｜end▁of▁sentence｜>", 1)
    vocab_size = max(list(vocab) + list(specials.values())) + 1

    with tempfile.TemporaryDirectory() as tmp:
        docs = encode(a.trex, a.tokenizer,
                      [json.loads(line)["text"] for line in open(a.train) if line.strip()], tmp)
    probe = probe_cases(a.trex, a.tokenizer, a.drills, a.count, a.probe_seed, bos, eos)

    model = Decoder(a, vocab_size)
    matrices = [w for w in model.parameters() if w.dim() == 2]
    vectors = [w for w in model.parameters() if w.dim() < 2]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": a.weight_decay},
                             {"params": vectors, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    order = list(range(len(docs)))
    random.Random(a.seed).shuffle(order)
    cursor = 0

    def next_batch():
        nonlocal cursor
        R, S = a.rows, a.seq + 1
        ids = torch.full((R, S), eos)
        pos = torch.zeros(R, S, dtype=torch.long)
        seg = torch.zeros(R, S, dtype=torch.long)
        for r in range(R):
            t = segment = 0
            while t < S:
                doc = ([bos] + docs[order[cursor % len(docs)]] + [eos])[:S - t]
                cursor += 1
                ids[r, t:t + len(doc)] = torch.tensor(doc)
                pos[r, t:t + len(doc)] = torch.arange(len(doc))
                seg[r, t:t + len(doc)] = segment
                t += len(doc)
                segment += 1
        labels = ids[:, 1:].clone()
        labels[seg[:, 1:] != seg[:, :-1]] = -100  # no target across a document boundary
        return ids[:, :-1], pos[:, :-1], seg[:, :-1], labels

    def lr_at(step):
        if step < a.warmup:
            return a.lr * (step + 1) / a.warmup
        progress = (step - a.warmup) / max(a.steps - a.warmup, 1)
        return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * progress))

    def value_accuracy():
        model.eval()
        total = right = 0
        with torch.no_grad():
            for ids, labels in probe:
                n = len(ids)
                pred = model(torch.tensor([ids]), torch.arange(n)[None],
                             torch.zeros(1, n, dtype=torch.long))[0].argmax(-1)
                for i in range(n - 1):
                    label = labels[i + 1]
                    if label == -100 or is_space_token(vocab, label):
                        continue
                    total += 1
                    right += int(pred[i] == label)
        model.train()
        return 100.0 * right / max(total, 1)

    start = time.time()
    for step in range(1, a.steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr_at(step - 1)
        ids, pos, seg, labels = next_batch()
        logits = model(ids, pos, seg)
        loss = F.cross_entropy(logits.view(-1, vocab_size), labels.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % a.probe_every == 0 or step == a.steps:
            print(json.dumps({"step": step, "loss": round(loss.item(), 3),
                              "value_accuracy": round(value_accuracy(), 1),
                              "seconds": round(time.time() - start)}), flush=True)


if __name__ == "__main__":
    main()
