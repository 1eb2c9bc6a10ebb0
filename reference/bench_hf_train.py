"""Training-throughput baseline: transformers' DeepseekV4ForCausalLM training steps on the CPU.

Runs the same model as `trex bench step` (the same released-scheme config file, random init, the
same batch and sequence length, the same number of threads) as PyTorch training steps with AdamW,
in fp32 and in bf16 autocast, each in its own child process so that peak RSS is measured per
precision, and reports the better of the two:

    reference/.venv/bin/python reference/bench_hf_train.py --config configs/models/bench-cpu.json \
        --seq 1024 --batch 1

Prints one human line per precision and a final JSON line
{"tokens_per_s", "peak_rss_bytes", "dtype", "step_seconds", ...} (the best precision).

Differences from T-Rex (reference/README.md, "Training baseline"): the port has no MTP block, which
T-Rex trains, so the baseline does less work per token than `trex bench step` with MTP enabled.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def run_child(args):
    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    from v4_configs import released_to_port_kwargs

    with open(args.config) as f:
        released = json.load(f)
    config = DeepseekV4Config(**released_to_port_kwargs(released))
    config._attn_implementation = "eager"
    torch.manual_seed(args.seed)
    model = DeepseekV4ForCausalLM(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    generator = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), generator=generator)

    def step():
        optimizer.zero_grad(set_to_none=True)
        if args.child == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        else:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        return float(loss)

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    result = {
        "dtype": args.child,
        "tokens_per_s": args.batch * args.seq / median,
        "step_seconds": median,
        "step_seconds_all": times,
        "peak_rss_bytes": peak_rss,
        "loss": loss,
        "threads": args.threads,
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
    }
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="released-scheme model config (JSON)")
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--steps", type=int, default=3, help="timed steps (median reported)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["fp32", "bf16", "both"], default="both")
    parser.add_argument("--child", choices=["fp32", "bf16"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args)
        return

    dtypes = ["fp32", "bf16"] if args.dtype == "both" else [args.dtype]
    results = []
    for dtype in dtypes:
        cmd = [sys.executable, os.path.abspath(__file__), "--config", args.config, "--seq", str(args.seq),
               "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--threads", str(args.threads), "--seed", str(args.seed), "--child", dtype]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        results.append(result)
        print(f"transformers {dtype}: {result['tokens_per_s']:.1f} tokens/s "
              f"(median step {result['step_seconds']:.3f} s over {args.steps}), "
              f"peak RSS {result['peak_rss_bytes'] / 2**30:.2f} GiB, loss {result['loss']:.4f}",
              file=sys.stderr)
    best = max(results, key=lambda r: r["tokens_per_s"])
    best["all"] = {r["dtype"]: {"tokens_per_s": r["tokens_per_s"], "peak_rss_bytes": r["peak_rss_bytes"]}
                   for r in results}
    print(json.dumps(best))


if __name__ == "__main__":
    main()
