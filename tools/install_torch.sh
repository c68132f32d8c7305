#!/usr/bin/env bash
# Install torch into a venv the way README.md says:
#   TORCH_PIP_ARGS set      -> pip install torch==$TORCH_VERSION $TORCH_PIP_ARGS   (what you asked for)
#   an NVIDIA GPU           -> pip install torch==$TORCH_VERSION                   (PyPI's CUDA build)
#   otherwise (a CPU)       -> torch==$TORCH_VERSION+cpu: a local wheel if pip's find-links has one,
#                              else PyTorch's CPU index (never the multi-GB CUDA build)
#   bash tools/install_torch.sh [VENV]     (`make setup` runs it)
set -euo pipefail
VENV="${1:-.venv}"
PY="$VENV/bin/python"
# shellcheck source=tools/locked_version.sh
source "$(dirname "${BASH_SOURCE[0]}")/locked_version.sh"
TORCH_VERSION="${TORCH_VERSION:-$(locked_version torch)}"
TORCH_PIP_ARGS="${TORCH_PIP_ARGS:-}"

# shellcheck source=tools/has_gpu.sh
source "$(dirname "${BASH_SOURCE[0]}")/has_gpu.sh"

installed="$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)"
if [[ -n "$TORCH_PIP_ARGS" ]]; then
  echo "install_torch: torch==$TORCH_VERSION $TORCH_PIP_ARGS"
  # shellcheck disable=SC2086
  "$PY" -m pip install -q "torch==$TORCH_VERSION" $TORCH_PIP_ARGS
elif has_gpu; then
  echo "install_torch: GPU found (nvidia-smi -L): torch==$TORCH_VERSION from PyPI (CUDA build)"
  "$PY" -m pip install -q "torch==$TORCH_VERSION"
elif [[ "$installed" == "$TORCH_VERSION+cpu" ]]; then
  echo "install_torch: torch $installed already installed"
else
  echo "install_torch: CPU: torch==$TORCH_VERSION+cpu"
  "$PY" -m pip install -q "torch==$TORCH_VERSION+cpu" 2>/dev/null ||
    "$PY" -m pip install -q "torch==$TORCH_VERSION+cpu" --index-url https://download.pytorch.org/whl/cpu
fi
"$PY" -c "import torch; print('install_torch: torch', torch.__version__, '| CUDA available:', torch.cuda.is_available())"
