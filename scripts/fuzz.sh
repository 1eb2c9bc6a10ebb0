#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets (clang, ASan + UBSan, TREX_FUZZ=ON) in
# $FUZZ_BUILD and runs each for FUZZ_SECONDS on a scratch copy of its checked-in
# corpus (fuzz/corpus/<target> plus fuzz/regressions/<target>; the checked-in
# corpus never grows by itself), then prints executions, coverage and findings
# per target. See docs/fuzzing.md.
#
#   FUZZ_SECONDS=60          seconds per target
#   FUZZ_TARGETS="a b"       a subset (default: every target in fuzz/fuzz.cmake)
#   FUZZ_BUILD=build-fuzz    build directory
#   FUZZ_WORK=$FUZZ_BUILD/fuzz-work   scratch corpora, artifacts, logs, summary
#   FUZZ_NICE=10             niceness of the fuzzers (shared machines)
#   FUZZ_NO_BUILD=1          skip installing and building (binaries already there)
#
# Exit status: 0 when no target found a crash, 1 otherwise (the reproducers are
# under $FUZZ_WORK/<target>/artifacts/; see docs/fuzzing.md for turning one into
# a regression input).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
FUZZ_BUILD="${FUZZ_BUILD:-build-fuzz}"
FUZZ_WORK="${FUZZ_WORK:-$FUZZ_BUILD/fuzz-work}"
FUZZ_NICE="${FUZZ_NICE:-10}"
JOBS="${JOBS:-$(nproc)}"
ALL_TARGETS=$(sed -n '/^set(TREX_FUZZ_TARGETS/,/)/p' fuzz/fuzz.cmake | tr -d '()' |
  sed 's/set\s*TREX_FUZZ_TARGETS//' | tr -s ' \n' ' ')
FUZZ_TARGETS="${FUZZ_TARGETS:-$ALL_TARGETS}"

# ---------------------------------------------------------------- build
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
  bash scripts/install-deps.sh
  # clang and its libFuzzer / OpenMP runtimes: only `make fuzz` needs them.
  FUZZ_PACKAGES=(clang libclang-rt-14-dev libomp-14-dev)
  missing=()
  for p in "${FUZZ_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "fuzz: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
  LAUNCHER=()
  if command -v ccache >/dev/null; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S . -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DTREX_FUZZ=ON -DTREX_BUILD_TESTS=OFF -DTREX_BUILD_BENCH=OFF \
    "${LAUNCHER[@]}"
  cmake --build "$FUZZ_BUILD" -j "$JOBS" --target fuzz_targets
fi

# ---------------------------------------------------------------- per-target settings
max_len() {
  case "$1" in
    tokenizer_json) echo 16384 ;;
    safetensors | model_config | run_config_json | run_config_toml | extract) echo 4096 ;;
    jsonl | cluster | expert_placement) echo 2048 ;;
    *) echo 1024 ;;
  esac
}
# The dictionary: JSON tokens for the JSON formats, plus the target's own words.
dict_parts() {
  case "$1" in
    safetensors | safetensors_index | tokenizer_json | model_config | run_config_json | jsonl | \
      cluster | expert_placement) echo fuzz/dict/json.dict ;;
  esac
  case "$1" in
    run_config_json) echo fuzz/dict/run_config.dict ;;
    run_config_toml) echo fuzz/dict/toml.dict ;;
    *) [ -f "fuzz/dict/$1.dict" ] && echo "fuzz/dict/$1.dict" ;;
  esac
  return 0
}

# ---------------------------------------------------------------- run
mkdir -p "$FUZZ_WORK"
FUZZ_WORK="$(cd "$FUZZ_WORK" && pwd)"
SUMMARY_TSV="$FUZZ_WORK/summary.tsv"
printf 'target\tseconds\texecutions\texec_per_s\tcov\tft\tcorpus\tcrashes\ttimeouts\tooms\n' >"$SUMMARY_TSV"
status=0
for t in $FUZZ_TARGETS; do
  bin="$FUZZ_BUILD/fuzz/${t}_fuzz"
  [ -x "$bin" ] || { echo "fuzz: $bin is missing (build with TREX_FUZZ=ON)" >&2; exit 2; }
  w="$FUZZ_WORK/$t"
  rm -rf "$w"
  mkdir -p "$w/corpus" "$w/artifacts"
  # The targets write each input to a scratch file: keep those in memory when possible.
  tmp="$w/tmp"
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then tmp="/dev/shm/trex-fuzz-$$-$t"; fi
  rm -rf "$tmp" && mkdir -p "$tmp"
  cp -r "fuzz/corpus/$t/." "$w/corpus/"
  if [ -d "fuzz/regressions/$t" ]; then
    for f in "fuzz/regressions/$t"/*; do [ -f "$f" ] && cp "$f" "$w/corpus/regression-$(basename "$f")"; done
  fi
  : >"$w/dict"
  for d in $(dict_parts "$t"); do cat "$d" >>"$w/dict"; done
  args=(-max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -max_len="$(max_len "$t")"
        -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$w/artifacts/")
  [ -s "$w/dict" ] && args+=(-dict="$w/dict")
  if [ "$t" = mathprog ]; then
    # A valid MathProg model can run or allocate without bound (see fuzz/mathprog_fuzz.cpp):
    # fork mode counts those and goes on; a crash still stops the run.
    args+=(-fork=1 -ignore_timeouts=1 -ignore_ooms=1 -timeout=5)
  fi
  echo "fuzz: $t for ${FUZZ_SECONDS}s ..."
  set +e
  (cd "$w" && TMPDIR="$tmp" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    nice -n "$FUZZ_NICE" "$ROOT/$bin" "${args[@]}" "$w/corpus" >"$w/log" 2>&1)
  rc=$?
  set -e
  rm -rf "$tmp"
  # Executions: the final stats (plain mode) or the last status line (fork mode).
  execs=$(sed -n 's/^stat::number_executed_units: *//p' "$w/log" | tail -1)
  line=$(grep -E '^#[0-9]+' "$w/log" | tail -1 || true)
  [ -n "$execs" ] || execs=$(echo "$line" | sed -E 's/^#([0-9]+).*/\1/')
  cov=$(echo "$line" | sed -nE 's/.*cov: ([0-9]+).*/\1/p')
  ft=$(echo "$line" | sed -nE 's/.*ft: ([0-9]+).*/\1/p')
  corp=$(find "$w/corpus" -type f | wc -l)
  crashes=$(find "$w/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' \) | wc -l)
  timeouts=$(find "$w/artifacts" -type f -name 'timeout-*' | wc -l)
  ooms=$(find "$w/artifacts" -type f -name 'oom-*' | wc -l)
  if [ "$t" = mathprog ]; then
    # fork mode: "oom/timeout/crash: a/b/c" on the status line
    otc=$(echo "$line" | sed -nE 's/.*oom\/timeout\/crash: ([0-9]+)\/([0-9]+)\/([0-9]+).*/\1 \2 \3/p')
    if [ -n "$otc" ]; then
      read -r ooms timeouts fork_crashes <<<"$otc"
      [ "$fork_crashes" -gt "$crashes" ] && crashes=$fork_crashes
    fi
  elif [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && [ "$timeouts" -eq 0 ] && [ "$ooms" -eq 0 ]; then
    crashes=1  # died without leaving an artifact: see the log
  fi
  if [ "$t" != mathprog ]; then crashes=$((crashes + timeouts + ooms)); fi
  rate=$(echo "$line" | sed -nE 's/.*exec\/s:? ([0-9]+).*/\1/p')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$FUZZ_SECONDS" "${execs:-0}" "${rate:-?}" \
    "${cov:-?}" "${ft:-?}" "$corp" "$crashes" "$timeouts" "$ooms" >>"$SUMMARY_TSV"
  if [ "$crashes" -gt 0 ]; then
    status=1
    echo "fuzz: $t FOUND A PROBLEM (log: $w/log, artifacts: $w/artifacts/)" >&2
    grep -m3 -E 'ERROR: |violated|runtime error|escaped' "$w/log" >&2 || true
  fi
done

echo
column -t -s $'\t' "$SUMMARY_TSV"
awk -F'\t' 'NR > 1 { s += $3 } END { printf "total executions: %d\n", s }' "$SUMMARY_TSV"
echo "(timeouts and OOMs count as problems except for mathprog, where a valid model may loop;"
echo " summary: $SUMMARY_TSV, logs and artifacts: $FUZZ_WORK/<target>/)"
exit "$status"
