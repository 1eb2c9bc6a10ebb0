#!/usr/bin/env bash
# Per-rank memory of real `trex train` runs against the dry-run accounting
# (`trex train --dry-run`), for a list of layouts of the bench-cpu model:
# each rank's peak RSS less what rank 0 held before building the model
# (libraries, tokenizer, data set, communicator: the summary's "before the
# model"), and rank 0's measured activation peak (the backend's buffers,
# metrics `activation_peak_mib`), beside the accounting's figures.
#
#   scripts/measure-memory-layouts.sh DEMO_DIR [OUT_DIR]
#
# DEMO_DIR holds tokenizer.json and data/cpt.jsonl (what `trex demo` writes).
# ONLY=REGEX runs the layouts whose name matches.
# Runs STEPS (default 2: the second is the steady state) optimizer steps of
# sequence 256 per layout (global batch 4); needs
# mpiexec, build/trex and about 9 GB of memory for the one-rank layouts.
set -euo pipefail

demo=${1:?usage: $0 DEMO_DIR [OUT_DIR]}
out=${2:-runs/memory-layouts}
trex=${TREX:-build/trex}
model=${MODEL:-configs/models/bench-cpu.json}
[[ -f "$demo/tokenizer.json" && -f "$demo/data/cpt.jsonl" ]] ||
  { echo "$demo has no tokenizer.json or data/cpt.jsonl (run trex demo first)" >&2; exit 1; }
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
  OMP_WAIT_POLICY=PASSIVE

# name|ranks|dp|ep|pp|zero|recompute|pipeline_layers|param_dtype (default fp32)
layouts=(
  "1rank-none|1|1|1|1|0|none||"
  "1rank-selective|1|1|1|1|0|selective||"
  "1rank-full|1|1|1|1|0|full||"
  "dp2-zero1|2|2|1|1|1|none||"
  "dp2-zero2|2|2|1|1|2|none||"
  "ep2-zero1|2|1|2|1|1|none||"
  "pp2-1f1b|2|1|1|2|0|none||"
  "pp4-full|4|1|1|4|0|full|2, 3, 3, 0|"
  "dp2-pp2-zero1-selective|4|2|1|2|1|selective||"
  "1rank-none-bf16|1|1|1|1|0|none||bf16"
  "dp2-zero1-bf16|2|2|1|1|1|none||bf16"
)

printf "%-24s %4s %9s %9s %11s %11s %8s %13s %13s %8s\n" layout rank "rss MiB" "base MiB" \
  "rss-base" "account MiB" "ratio" "buf. peak MiB" "buf. acct MiB" "ratio"
for entry in "${layouts[@]}"; do
  IFS='|' read -r name ranks dp ep pp zero recompute layers param_dtype <<<"$entry"
  [[ -n "${ONLY:-}" && ! "$name" =~ $ONLY ]] && continue
  dir="$(realpath "$out")/$name"
  rm -rf "$dir" && mkdir -p "$dir"
  {
    echo "tokenizer = \"$(realpath "$demo/tokenizer.json")\""
    echo "seq_len = 256"
    echo "micro_batch = 1"
    echo "global_batch = 4"
    echo "steps = ${STEPS:-2}"
    echo "precision = \"bf16\""
    echo "recompute = \"$recompute\""
    echo "param_dtype = \"${param_dtype:-fp32}\""
    echo "checkpoint_interval = 0"
    echo "out_dir = \"$dir/out\""
    echo "[model]"
    echo "config = \"$(realpath "$model")\""
    echo "seed = 1"
    echo "[data]"
    echo "mode = \"cpt\""
    echo "train = \"$(realpath "$demo/data/cpt.jsonl")\""
    echo "[parallel]"
    echo "dp = $dp"
    echo "ep = $ep"
    echo "pp = $pp"
    echo "zero = $zero"
    [[ -n "$layers" ]] && echo "pipeline_layers = [$layers]"
  } >"$dir/run.toml"
  "$trex" train --config "$dir/run.toml" --dry-run >"$dir/dry-run.txt"
  mpiexec -n "$ranks" --oversubscribe --bind-to none --mca btl self,vader \
    --mca btl_vader_single_copy_mechanism none \
    bash -c 'exec /usr/bin/time -o "$0/rss.$OMPI_COMM_WORLD_RANK" -f %M "$1" train --config "$0/run.toml" --quiet' \
    "$dir" "$trex" >"$dir/train.log" 2>&1
  act_peak=$(grep -o '"activation_peak_mib": *[0-9.]*' "$dir/out/metrics.jsonl" | tail -1 |
    grep -o '[0-9.]*$')
  base=$(grep -o '[0-9.]* MiB before the model' "$dir/train.log" | grep -o '^[0-9.]*')
  [[ -n "$act_peak" && -n "$base" ]] || { echo "$name: the run failed, see $dir/train.log" >&2; exit 1; }
  rm -rf "$dir/out/checkpoints"  # 3.7 GB per layout
  for ((r = 0; r < ranks; ++r)); do
    rss_kb=$(cat "$dir/rss.$r")
    awk -v name="$name" -v r="$r" -v dp="$dp" -v ep="$ep" -v rss_kb="$rss_kb" \
      -v act_peak="${act_peak:-0}" -v base="${base:-0}" '
      # Role rows: stage, EP, ranks, params, decoded, grads, master, moments "min-max",
      # opt work, activations, of which backend buffers, in flight, comm, total.
      $1 ~ /^[0-9]+$/ && NF == 14 { total[$1 "/" $2] = $14; act[$1 "/" $2] = $11 }
      END {
        e = r % ep; p = int(r / (ep * dp)); key = p "/" e
        rss = rss_kb / 1024
        printf "%-24s %4d %9.1f %9.1f %11.1f %11.1f %8.3f", name, r, rss, base, rss - base,
               total[key], (rss - base) / total[key]
        if (r == 0) printf " %13.1f %13.1f %8.3f", act_peak, act[key], act_peak / act[key]
        printf "\n"
      }' "$dir/dry-run.txt"
  done
done
