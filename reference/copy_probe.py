#!/usr/bin/env python3
"""Teacher-forced copy probe for demo copy drills (docs/demo.md, "Copy drills").

For each drill (a question span, then "in order:" and the span's values), runs
`trex forward` on [BOS] + drill + [EOS] with labels only after "in order:" and
counts how often the greedy prediction is the expected token; the space tokens
between values are reported apart. Standard library only (no torch needed).

  python3 reference/copy_probe.py --trex build/trex --checkpoint CKPT \
      --drills DRILLS.jsonl [--count 40] [--seed 5]

DRILLS.jsonl: {"text": ...} lines (e.g. the copy_drill lines of a demo cpt.jsonl).
"""
import argparse
import array
import json
import os
import random
import struct
import subprocess
import tempfile

MARK = "\nin order:"


def encode(trex, tokenizer, texts, tmp):
    src = os.path.join(tmp, "texts.jsonl")
    with open(src, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    out = subprocess.run([trex, "tokenizer", "encode", "--tokenizer", tokenizer, "--input", src,
                          "--jsonl"], check=True, capture_output=True, text=True).stdout
    return [json.loads(line)["ids"] for line in out.splitlines() if line.strip()]


def read_logits(path):
    blob = open(path, "rb").read()
    header_len = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + header_len])
    t = header["logits"]
    begin, end = t["data_offsets"]
    values = array.array("f")
    values.frombytes(blob[8 + header_len + begin:8 + header_len + end])
    return values, t["shape"][1], t["shape"][2]


def probe_cases(trex, tokenizer, drills_path, count, seed, bos, eos):
    """The probe's drills as (ids, labels): [BOS] + drill + [EOS], labels only after MARK."""
    texts = [json.loads(line)["text"] for line in open(drills_path) if line.strip()]
    texts = [t for t in texts if MARK in t]
    random.seed(seed)
    texts = random.sample(texts, min(count, len(texts)))
    with tempfile.TemporaryDirectory() as tmp:
        prefixes = encode(trex, tokenizer, [t[:t.rfind(MARK) + len(MARK)] for t in texts], tmp)
        fulls = encode(trex, tokenizer, texts, tmp)
    cases = []
    for prefix, full in zip(prefixes, fulls):
        m = 0  # the prefix may tokenise differently at its end: keep the common part
        while m < len(prefix) and m < len(full) and prefix[m] == full[m]:
            m += 1
        cases.append(([bos] + full + [eos], [-100] * (1 + m) + full[m:] + [-100]))
    return cases


def is_space_token(vocab, token_id):
    return vocab.get(token_id) == "\u0120"  # the byte-level space token


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trex", default="build/trex")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--drills", required=True)
    p.add_argument("--count", type=int, default=40)
    p.add_argument("--seed", type=int, default=5)
    a = p.parse_args()
    tokenizer = os.path.join(a.checkpoint, "tokenizer.json")
    model = json.load(open(os.path.join(a.checkpoint, "config.json")))
    vocab = {v: k for k, v in json.load(open(tokenizer))["model"]["vocab"].items()}
    cases = probe_cases(a.trex, tokenizer, a.drills, a.count, a.seed, model["bos_token_id"],
                        model["eos_token_id"])
    values_total = values_right = spaces_total = spaces_right = whole_right = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ids, labels in cases:
            tokens = os.path.join(tmp, "tokens.json")
            json.dump({"input_ids": [ids], "labels": [labels]}, open(tokens, "w"))
            out = os.path.join(tmp, "out.safetensors")
            subprocess.run([a.trex, "forward", "--checkpoint", a.checkpoint, "--tokens", tokens,
                            "--out", out], check=True, capture_output=True)
            logits, seq, width = read_logits(out)
            all_right = True
            for pos in range(seq - 1):
                label = labels[pos + 1]
                if label == -100:
                    continue
                row = logits[pos * width:(pos + 1) * width]
                right = max(range(width), key=row.__getitem__) == label
                all_right &= right
                if is_space_token(vocab, label):
                    spaces_total += 1
                    spaces_right += right
                else:
                    values_total += 1
                    values_right += right
            whole_right += all_right
    print(json.dumps({"checkpoint": a.checkpoint, "drills": len(cases),
                      "value_tokens": values_total,
                      "value_accuracy": round(100.0 * values_right / max(values_total, 1), 1),
                      "space_tokens": spaces_total,
                      "space_accuracy": round(100.0 * spaces_right / max(spaces_total, 1), 1),
                      "drills_all_right": whole_right}))


if __name__ == "__main__":
    main()
