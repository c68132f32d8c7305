#!/usr/bin/env bash
# Benchmark 4: the whole-book build (every lab executed) in the smoke preset, with each lab's
# execution time as MyST-NB reports it.   bash bench/bench_book.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export RL_LAB_PRESET="${RL_LAB_PRESET:-smoke}"
t0=$(date +%s.%N)
bash tools/build_book.sh >/dev/null 2>&1 || { echo "book build failed: see _build/build_book.log"; exit 1; }
t1=$(date +%s.%N)
echo "whole-book build, preset $RL_LAB_PRESET: $(python3 -c "print(f'{$t1 - $t0:.0f}')") s ($(grep -o '[0-9]* page(s) at a time.*' _build/build_book.log | head -1); RL_LAB_BOOK_JOBS=1 for one)"
grep -E "Executed notebook" _build/build_book.log | sed -E 's/\x1b\[[0-9;]*m//g' |
  sed -E 's#.*/(labs/[^ ]+).*in ([0-9.]+) seconds.*#  \1: \2 s#' | grep labs || true
