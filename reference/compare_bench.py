"""Side by side: `trex bench step` against the transformers baseline, alternated A B A B.

For each sequence length, runs `rounds` pairs back to back (T-Rex, then the baseline), so both
sides see the same machine load, and reports the medians over the rounds: tokens/s, peak RSS,
peak RSS per token, T-Rex's MFU, and the ratios T-Rex / baseline.

    reference/.venv/bin/python reference/compare_bench.py --config configs/models/bench-cpu.json \
        --seq 1024 4096 --rounds 2 --peak-gflops 386.6 --out bench-compare.json

T-Rex runs `--dtype bf16 --optimizer adamw` by default (AdamW on every parameter, as the
baseline); the baseline runs the precision given by --hf-dtype ("both" takes the better of fp32
and bf16 autocast, as bench_hf_train.py does). Each child's stderr goes to the terminal.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_json(cmd, env=None):
    """Runs cmd, returns the JSON object on its last stdout line."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    lines = [line for line in out.strip().splitlines() if line.strip()]
    if not lines:
        raise SystemExit(f"no output from: {' '.join(cmd)}")
    # `trex bench step --json` prints one (possibly multi-line) object; the baseline one line.
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return json.loads(lines[-1])


def trex_command(args, seq):
    cmd = [args.trex, "bench", "step", "--config", args.config, "--seq", str(seq), "--batch",
           str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup), "--dtype",
           args.trex_dtype, "--optimizer", args.optimizer, "--mtp", str(args.mtp), "--json"]
    if args.peak_gflops:
        cmd += ["--peak-gflops", str(args.peak_gflops)]
    return cmd


def hf_command(args, seq):
    return [args.python, os.path.join(HERE, "bench_hf_train.py"), "--config", args.config, "--seq",
            str(seq), "--batch", str(args.batch), "--steps", str(args.steps), "--warmup",
            str(args.warmup), "--threads", str(args.threads), "--dtype", args.hf_dtype]


def median(values):
    return statistics.median(values) if values else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=os.path.join("configs", "models", "bench-cpu.json"))
    p.add_argument("--seq", type=int, nargs="+", default=[1024])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2, help="A B pairs per sequence length")
    p.add_argument("--steps", type=int, default=2, help="timed steps per run (median)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--trex", default=os.path.join("build", "trex"))
    p.add_argument("--trex-dtype", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw")
    p.add_argument("--mtp", type=int, choices=[0, 1], default=1)
    p.add_argument("--hf-dtype", choices=["fp32", "bf16", "both"], default="bf16")
    p.add_argument("--peak-gflops", type=float, default=0.0,
                   help="bf16 (or fp32) GEMM peak for T-Rex's MFU; 0: T-Rex measures it")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch + transformers")
    p.add_argument("--out", help="write the summary JSON here")
    args = p.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    if not os.path.exists(args.trex):
        raise SystemExit(f"--trex {args.trex}: no such file (build it: cmake --build build --target trex)")

    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    summary = {"config": args.config, "batch": args.batch, "rounds": args.rounds,
               "steps": args.steps, "warmup": args.warmup, "threads": args.threads,
               "trex_dtype": args.trex_dtype, "optimizer": args.optimizer, "hf_dtype": args.hf_dtype,
               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "by_seq": {}}
    for seq in args.seq:
        trex_runs, hf_runs = [], []
        for r in range(args.rounds):
            trex_runs.append(run_json(trex_command(args, seq), env))
            hf_runs.append(run_json(hf_command(args, seq), env))
            print(f"seq {seq} round {r + 1}: trex {trex_runs[-1]['tokens_per_second']:.1f} tok/s, "
                  f"transformers {hf_runs[-1]['tokens_per_s']:.1f} tok/s", file=sys.stderr, flush=True)
        tokens = args.batch * seq
        t_tps = median([x["tokens_per_second"] for x in trex_runs])
        h_tps = median([x["tokens_per_s"] for x in hf_runs])
        t_rss = median([x["memory"]["peak_rss_bytes"] for x in trex_runs])
        h_rss = median([x["peak_rss_bytes"] for x in hf_runs])
        summary["by_seq"][str(seq)] = {
            "trex_tokens_per_s": t_tps,
            "trex_tokens_per_s_runs": [x["tokens_per_second"] for x in trex_runs],
            "trex_mfu": median([x["mfu"] for x in trex_runs]),
            "trex_forward_backward_mfu": median([x["forward_backward_mfu"] for x in trex_runs]),
            "trex_peak_gflops": trex_runs[-1]["peak_gflops"],
            "trex_peak_rss_bytes": t_rss,
            "hf_tokens_per_s": h_tps,
            "hf_tokens_per_s_runs": [x["tokens_per_s"] for x in hf_runs],
            "hf_dtype": [x["dtype"] for x in hf_runs],
            "hf_peak_rss_bytes": h_rss,
            "speedup": t_tps / h_tps,
            "memory_per_token_ratio": (t_rss / tokens) / (h_rss / tokens),
        }
    summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    print("| seq | T-Rex tok/s | transformers tok/s | speedup | T-Rex MFU | T-Rex GiB | "
          "transformers GiB | memory ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for seq, s in summary["by_seq"].items():
        print(f"| {seq} | {s['trex_tokens_per_s']:.1f} | {s['hf_tokens_per_s']:.1f} | "
              f"{s['speedup']:.2f}x | {100 * s['trex_mfu']:.1f}% | "
              f"{s['trex_peak_rss_bytes'] / 2**30:.2f} | {s['hf_peak_rss_bytes'] / 2**30:.2f} | "
              f"{s['memory_per_token_ratio']:.2f} |")
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=2)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
