#!/usr/bin/env bash
# The first GPU hour (issue 57): one command that checks this project on the GPU machine as it is
# (its own Python 3.12 + torch + transformers, no vLLM, no TRL, no network, rl_lab not installed:
# PYTHONPATH=.).  Under 8 minutes on one H100/H200.  Everything it writes goes under $OUT (a temp
# folder when $OUT is unset).  One summary line per part, printed as the part ends:
#
#     [device-check] part=<name> status=ok|fail|skip seconds=<s> key=value ...
#
# so a run killed at its limit still returns the parts it finished.  Each part runs under its own
# `timeout`; a failure does not stop the next part.  The parts (tools/device_check.py has each):
#   env        Python, torch, CUDA, GPU, package versions; what is missing (vllm, trl); imports every rl_lab module
#   cuda_tests tests/integration/test_cuda.py with PYTHONPATH=. (the vLLM case skips with its reason)
#   grpo_steps one GRPO step per engine and per estimator, `gpu` preset, the 0.5B-shaped model (built from config)
#   bench      benchmarks 1, 3 and 10 in GPU form without vLLM/TRL: tokens/s, model FLOP/s, fraction of bf16 peak
#   stability  one cell of the GPU stability map at 30M: k3 of bf16 and fp16 samplers against fp32
#
#     bash tools/device_check.sh                        # on the GPU machine (device `run`, timeout_s 540)
#     RL_LAB_DEVICE_DRY=1 RL_LAB_DEVICE=cpu bash tools/device_check.sh     # tiny sizes on the CPU (tools/device_rehearsal.sh)
#     DEVICE_CHECK_PARTS="env bench" bash tools/device_check.sh          # some parts only
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$(mktemp -d -t device-check.XXXXXX)}
export OUT
mkdir -p "$OUT"
# each part's key=value results go to a scratch folder outside $OUT (at most 8 files come back from
# $OUT: summary.txt, results.json and one log per part)
DEVICE_CHECK_KV=$(mktemp -d -t device-check-kv.XXXXXX)
export DEVICE_CHECK_KV
PY=${DEVICE_CHECK_PYTHON:-python3}
PARTS=${DEVICE_CHECK_PARTS:-"env cuda_tests grpo_steps bench stability"}
# seconds per part (sum 450 s: inside 8 minutes, and a 540 s device `run` keeps a minute spare)
declare -A LIMIT=([env]=40 [cuda_tests]=110 [grpo_steps]=120 [bench]=100 [stability]=80)
echo "[device-check] start out=$OUT dry=${RL_LAB_DEVICE_DRY:-0} device=${RL_LAB_DEVICE:-auto} parts=${PARTS// /,}"
: > "$OUT/summary.txt"
for part in $PARTS; do
  t0=$(date +%s)
  limit=${LIMIT[$part]:-120}
  # the dry rehearsal runs on a slow, shared CPU: its limits are 4x (the GPU run keeps the ones above)
  if [ "${RL_LAB_DEVICE_DRY:-0}" != "0" ]; then limit=$(( limit * 4 )); fi
  timeout -k 10 "$limit" "$PY" tools/device_check.py run "$part" > "$OUT/$part.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  line=$("$PY" tools/device_check.py summary "$part" "$rc" "$secs" 2>/dev/null) \
    || line="[device-check] part=$part status=fail seconds=$secs rc=$rc note=summary_failed"
  echo "$line" | tee -a "$OUT/summary.txt"
  if [ "$rc" -ne 0 ]; then tail -n 15 "$OUT/$part.log" | sed "s/^/  [$part] /"; fi
done
"$PY" tools/device_check.py collect > /dev/null 2>&1 || true
echo "[device-check] done out=$OUT"
