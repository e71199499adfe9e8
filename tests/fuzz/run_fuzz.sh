#!/bin/sh
# run_fuzz.sh <fuzzer> <work-dir> <seconds>: runs a libFuzzer binary for a bounded time on a corpus
# kept in <work-dir>/corpus (seeded with valid entries by the fuzzer itself). Exit 77 = skipped.
# By hand, longer: run_fuzz.sh build/tests/fuzz/kiln_entry_fuzz /tmp/kiln-fuzz 3600
set -eu
fuzzer=$1
work=$2
seconds=$3
if [ ! -x "$fuzzer" ]; then
  echo "SKIPPED: $fuzzer was not built (clang with libFuzzer missing?)"
  exit 77
fi
mkdir -p "$work/corpus"
KILN_FUZZ_WRITE_SEEDS="$work/corpus" exec "$fuzzer" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 "$work/corpus"
