#!/usr/bin/env python3
"""Loads a `trex export` directory (transformers naming) with transformers' DeepseekV4ForCausalLM
(the unmodified port, float32, CPU) and compares its logits on the given tokens with the logits
`trex forward` wrote for the same directory. Prints the max absolute and relative error (relative
to max |logit|); exit status 0 when the relative error is within --tol.

    trex export  --checkpoint RUN/checkpoints/step-N --out HF --dtype fp32
    trex forward --checkpoint HF --tokens tokens.json --out HF/trex_logits.safetensors
    reference/.venv/bin/python reference/check_export.py HF --tokens tokens.json \
        --logits HF/trex_logits.safetensors

tokens.json is [[ids...], ...] (equal-length rows), as `trex forward --tokens` reads it.
Router / indexer top-k: the port's torch.topk may order exact ties differently from T-Rex's
lowest-index rule (docs/deepseek-v4-hf-port.md); --stable-topk replaces Tensor.topk by a stable
lowest-index-first version for the comparison.
"""
import argparse
import json
import pathlib
import sys

import torch
from safetensors.torch import load_file
from transformers import DeepseekV4ForCausalLM


def stable_topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's signature
    order = torch.sort(self, dim=dim, descending=largest, stable=True)
    idx = order.indices.narrow(dim, 0, k)
    return torch.return_types.topk((self.gather(dim, idx), idx))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export_dir", type=pathlib.Path)
    ap.add_argument("--tokens", type=pathlib.Path, required=True)
    ap.add_argument("--logits", type=pathlib.Path, default=None,
                    help="trex forward output (default: EXPORT_DIR/trex_logits.safetensors)")
    ap.add_argument("--tol", type=float, default=1e-4, help="max relative error allowed")
    ap.add_argument("--stable-topk", action="store_true")
    args = ap.parse_args()

    rows = json.loads(args.tokens.read_text())
    if rows and not isinstance(rows[0], list):
        rows = [rows]
    ids = torch.tensor(rows, dtype=torch.long)
    trex_logits = load_file(str(args.logits or args.export_dir / "trex_logits.safetensors"))["logits"]

    model = DeepseekV4ForCausalLM.from_pretrained(str(args.export_dir), dtype=torch.float32)
    model.eval()
    original = torch.Tensor.topk
    if args.stable_topk:
        torch.Tensor.topk = stable_topk
    try:
        with torch.no_grad():
            port_logits = model(input_ids=ids, use_cache=False).logits.float()
    finally:
        torch.Tensor.topk = original
    if port_logits.shape != trex_logits.shape:
        print(f"shape mismatch: port {tuple(port_logits.shape)} vs trex {tuple(trex_logits.shape)}")
        return 1
    abs_err = (port_logits - trex_logits).abs().max().item()
    rel_err = abs_err / trex_logits.abs().max().item()
    print(f"{args.export_dir}: {ids.shape[0]}x{ids.shape[1]} tokens, vocab {trex_logits.shape[-1]}: "
          f"max abs err {abs_err:.3e}, max rel err {rel_err:.3e} (tol {args.tol:g}): "
          f"{'OK' if rel_err <= args.tol else 'FAIL'}")
    return 0 if rel_err <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
