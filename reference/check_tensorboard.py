#!/usr/bin/env python3
"""Reads the TensorBoard event files `trex train` writes (OUT/tensorboard) with the PyPI
`tensorboard` package's EventAccumulator and checks every scalar tag, step and value against
OUT/metrics.jsonl (the same records; JSONL doubles are compared after rounding to float32, the
precision of TensorBoard's simple_value). Exit status 0 when everything matches.

    reference/.venv/bin/python reference/check_tensorboard.py OUT/tensorboard [--jsonl OUT/metrics.jsonl]
"""
import argparse
import json
import math
import pathlib
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("events_dir", type=pathlib.Path)
    ap.add_argument("--jsonl", type=pathlib.Path, default=None,
                    help="metrics.jsonl (default: EVENTS_DIR/../metrics.jsonl)")
    args = ap.parse_args()
    jsonl = args.jsonl or args.events_dir.parent / "metrics.jsonl"

    expected = {}  # tag -> {step: value}; a later record of the same step wins (resumed runs)
    with open(jsonl) as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            step = rec["step"]
            for tag, value in rec.items():
                if tag != "step" and value is not None:
                    expected.setdefault(tag, {})[step] = value

    acc = EventAccumulator(str(args.events_dir), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    problems = []
    if tags != set(expected):
        problems.append(f"tags differ: only in events {sorted(tags - set(expected))}, "
                        f"only in JSONL {sorted(set(expected) - tags)}")
    checked = 0
    for tag in sorted(tags & set(expected)):
        got = {}
        for event in acc.Scalars(tag):
            got[event.step] = event.value
        if set(got) != set(expected[tag]):
            problems.append(f"{tag}: steps {sorted(got)} vs JSONL {sorted(expected[tag])}")
            continue
        for step, value in expected[tag].items():
            want = f32(value)
            ok = got[step] == want or (math.isinf(want) and got[step] == want)
            if not ok:
                problems.append(f"{tag} step {step}: events {got[step]!r} vs JSONL {want!r}")
            checked += 1
    for p in problems[:20]:
        print("MISMATCH", p)
    print(f"{len(tags)} tags, {checked} scalar values checked against {jsonl}: "
          f"{'OK' if not problems else f'{len(problems)} problems'}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
