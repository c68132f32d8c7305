#!/usr/bin/env bash
# CPU rehearsal of tools/device_check.sh (issue 57): a venv with the GPU machine's versions
# (Python 3.12, torch 2.11, transformers 5.17, accelerate, peft, pandas, matplotlib, pyyaml,
# safetensors, pytest, pytest-xdist; no vLLM, no TRL, and rl_lab NOT pip-installed), then the
# check in its dry mode (tiny sizes, RL_LAB_DEVICE=cpu) with PYTHONPATH=. -- as the GPU machine
# runs it.  Fails on any part that fails (an import or version error included).
#
#     bash tools/device_rehearsal.sh            # venv in $DEVICE_VENV (default ~/.cache/rl_lab/device-venv)
#
# torch: PyPI's torch==2.11.0 (download.pytorch.org's CPU index is not reachable from every
# machine); on Linux x86-64 it pulls the CUDA libraries (a few GB) and runs on the CPU.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${DEVICE_VENV:-$HOME/.cache/rl_lab/device-venv}
PY=${DEVICE_PYTHON:-$( (command -v python3.12 >/dev/null && python3.12 -c1 2>/dev/null && echo python3.12) || echo python3)}
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.complete" ]; then
  "$PY" -m venv "$VENV" || exit 1
  "$VENV/bin/python" -m pip install -q --upgrade pip || exit 1
  "$VENV/bin/python" -m pip install -q "torch==2.11.*" || exit 1
  "$VENV/bin/python" -m pip install -q "transformers==5.17.*" accelerate peft pandas matplotlib pyyaml \
      safetensors pytest pytest-xdist || exit 1
  touch "$VENV/.complete"
fi
"$VENV/bin/python" -c "import torch, transformers, sys; print('[rehearsal] python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"
for pkg in vllm trl; do
  if "$VENV/bin/python" -c "import $pkg" 2>/dev/null; then echo "[rehearsal] $pkg is installed in $VENV: the GPU machine has none"; exit 1; fi
done
out=${OUT:-$(mktemp -d -t device-rehearsal.XXXXXX)}
echo "[rehearsal] output in $out"
PATH="$VENV/bin:$PATH" OUT="$out" RL_LAB_DEVICE_DRY=1 RL_LAB_DEVICE=cpu DEVICE_CHECK_PYTHON="$VENV/bin/python" \
  bash tools/device_check.sh
rc=$?
bad=$(grep -c 'status=fail' "$out/summary.txt" 2>/dev/null); bad=${bad:-0}
echo "[rehearsal] device_check.sh rc=$rc, failed parts: $bad"
[ "$rc" -eq 0 ] && [ "$bad" -eq 0 ]
