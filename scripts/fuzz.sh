#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder a client reaches (docs/fuzzing.md), with libFuzzer
# on stable Rust: the fuzz crate (fuzz/) is built with LLVM's SanitizerCoverage passes, which
# stable rustc takes as ordinary -C flags, and linked with libFuzzer from the libfuzzer-sys
# crate. No nightly, no cargo-fuzz, no sanitizer runtime.
#
#   scripts/fuzz.sh ci            build, then every target for $FUZZ_CI_SECONDS (default 8) s,
#                                 two at a time, from a fixed seed ($FUZZ_SEED, default 1) so
#                                 that a run explores what the last one did; fails on any
#                                 crash, panic or bound exceeded
#   scripts/fuzz.sh long [HOURS]  every target for HOURS in all (default 1), one per core,
#                                 each target getting an equal share; crashes are kept under
#                                 fuzz/artifacts/ and fail the run at its end
#   scripts/fuzz.sh run TARGET [SECONDS] [libFuzzer flags...]
#   scripts/fuzz.sh replay [TARGET...]   the committed corpus and regressions, once each
#   scripts/fuzz.sh peaks TARGET         each corpus input's peak memory against its input
#   scripts/fuzz.sh build | list
#
# The build goes to $TANDEM_FUZZ_TARGET_DIR (default ~/.cache/tandem/fuzz-target), outside
# the clone, so a machine that fuzzed before rebuilds only what changed. What a run grows
# (fuzz/work/TARGET) and what it finds (fuzz/artifacts/TARGET) stay out of git.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(infer_json infer_binary content_coding admin_json embeddings_json coloc_line
  checkpoint encoder_config encoder_weights tokenize model_config grpc_infer)

# Inputs no larger than what each route accepts (gateway::fuzzing::max_len says why).
max_len() {
  case "$1" in
    content_coding) echo 163840 ;;
    checkpoint | encoder_weights) echo 131072 ;;
    admin_json) echo 65536 ;;
    coloc_line) echo 81920 ;;
    *) echo 16384 ;;
  esac
}

dict_flag() {
  case "$1" in
    content_coding | tokenize) ;;
    *) echo "-dict=fuzz/dict/json.dict" ;;
  esac
}

export CARGO_TARGET_DIR="${TANDEM_FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem/fuzz-target}"
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
BIN="$CARGO_TARGET_DIR/$TRIPLE/release"

# What libFuzzer needs of the build: inline 8-bit edge counters, the PC table that maps them
# to code, and comparisons traced (for magic values and lengths). The flags are given with
# --target so that build scripts and proc macros, which run on the host, stay uninstrumented.
SANCOV="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth"

ensure_tools() {
  # libfuzzer-sys compiles libFuzzer's C++ sources.
  if ! command -v c++ >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ >/dev/null
  fi
}

build() {
  ensure_tools
  local started=$SECONDS
  RUSTFLAGS="$SANCOV" cargo build --release --locked --manifest-path fuzz/Cargo.toml \
    --target "$TRIPLE" --bins
  echo "fuzz: built in $((SECONDS - started)) s ($BIN)"
}

corpus_dirs() {
  local t=$1
  mkdir -p "fuzz/work/$t" "fuzz/artifacts/$t"
  echo "fuzz/work/$t fuzz/corpus/$t"
  if [ -d "fuzz/regressions/$t" ]; then echo "fuzz/regressions/$t"; fi
}

# One target for SECONDS; its log in fuzz/work/TARGET.log, its summary on stdout.
run_target() {
  local t=$1 seconds=$2
  shift 2
  local log="fuzz/work/$t.log"
  local status=0
  # shellcheck disable=SC2046
  "$BIN/$t" -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" \
    $(dict_flag "$t") "$@" $(corpus_dirs "$t") >"$log" 2>&1 || status=$?
  local runs cov
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $status); the input is in fuzz/artifacts/$t/, the log's end:"
    tail -40 "$log"
    return 1
  fi
  echo "fuzz: $t ok: ${runs:-?} inputs in ${seconds} s (${cov:-no coverage line})"
}

ci() {
  local seconds=${FUZZ_CI_SECONDS:-8} started=$SECONDS
  build
  local failed=0
  export -f run_target max_len dict_flag corpus_dirs
  export BIN
  printf '%s\n' "${TARGETS[@]}" |
    xargs -P 2 -I{} bash -c "run_target {} $seconds -seed=${FUZZ_SEED:-1}" || failed=1
  echo "fuzz: ci took $((SECONDS - started)) s in all"
  return $failed
}

long() {
  local hours=${1:-1} cores
  cores=$(nproc)
  build
  # Each target gets an equal share of cores × hours; fork mode keeps going past a crash
  # (saving it) instead of stopping at the first.
  local share=$((${hours%.*} * 3600 * cores / ${#TARGETS[@]}))
  [ "$share" -gt 0 ] || share=$(python3 -c "print(int($hours * 3600 * $cores / ${#TARGETS[@]}))")
  echo "fuzz: ${#TARGETS[@]} targets, $share s each, $cores at a time"
  export -f run_target max_len dict_flag corpus_dirs
  export BIN
  printf '%s\n' "${TARGETS[@]}" |
    xargs -P "$cores" -I{} bash -c "run_target {} $share -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1" || true
  local found
  found=$(find fuzz/artifacts -type f | wc -l)
  if [ "$found" -ne 0 ]; then
    echo "fuzz: $found inputs failed; reproduce one with: $BIN/TARGET fuzz/artifacts/TARGET/FILE"
    find fuzz/artifacts -type f
    return 1
  fi
  echo "fuzz: nothing found"
}

case "${1:-}" in
  ci) ci ;;
  long) long "${2:-1}" ;;
  build) build ;;
  list) printf '%s\n' "${TARGETS[@]}" ;;
  run)
    t=${2:?target}
    shift 2 || shift 1
    seconds=${1:-60}
    shift || true
    [ -x "$BIN/$t" ] || build
    run_target "$t" "$seconds" "$@"
    ;;
  replay)
    shift
    [ $# -gt 0 ] || set -- "${TARGETS[@]}"
    for t in "$@"; do
      [ -x "$BIN/$t" ] || build
      # shellcheck disable=SC2046
      "$BIN/$t" -runs=0 $(corpus_dirs "$t" | cut -d' ' -f2-) 2>&1 | grep -E "INITED|DONE|panicked|ERROR" || true
    done
    ;;
  peaks)
    t=${2:?target}
    [ -x "$BIN/$t" ] || build
    # shellcheck disable=SC2046
    TANDEM_FUZZ_PEAK=1 "$BIN/$t" -runs=0 $(corpus_dirs "$t" | cut -d' ' -f2-) 2>&1 | grep '^peak' | sort -t'(' -k2 -g
    ;;
  *)
    sed -n '2,22p' "$0"
    exit 2
    ;;
esac
