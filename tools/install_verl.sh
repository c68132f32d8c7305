#!/usr/bin/env bash
# Install verl 0.9.1 for the conformance tests (tests/integration/test_verl_conformance.py), without
# its training stack: `--no-deps`, then only the packages its rollout-correction and
# core_algos modules import at import time (packaging, numpy, ray, tensordict, omegaconf,
# transformers, codetiming), and hydra-core, datasets and pyarrow for the export tests
# (tests/integration/test_verl_export.py).  torch, numpy, transformers and the other packages rl_lab
# already installed are kept as they are (a constraints file pins them).
#
#   bash tools/install_verl.sh [VENV]      # default VENV=.venv; safe to run again
#
# Note: the verl wheel also installs top-level packages named `tests` and `scripts` into
# site-packages; rl_lab's tests are run by path (pytest tests/...), which is unaffected.
set -euo pipefail
VENV="${1:-.venv}"
PY="$VENV/bin/python"
# shellcheck source=tools/locked_version.sh
source "$(dirname "${BASH_SOURCE[0]}")/locked_version.sh"
VERL_VERSION="$(locked_version verl)"
CONSTRAINTS="${CONSTRAINTS-$(dirname "${BASH_SOURCE[0]}")/../rl_lab/constraints.txt}"   # the tested versions of verl's requirements
if [ ! -x "$PY" ]; then
    echo "install_verl.sh: no python at $PY (create the venv first, e.g. make setup)" >&2
    exit 2
fi

check() {
    "$PY" - "$VERL_VERSION" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
assert version("verl") == sys.argv[1]
import verl.trainer.ppo.rollout_corr_helper  # noqa: F401  (the modules the tests use)
import verl.trainer.ppo.core_algos  # noqa: F401
import hydra, pyarrow, verl.utils.dataset.rl_dataset  # noqa: F401,E401  (the export tests)
PYEOF
}

if check; then
    echo "verl $VERL_VERSION already importable in $VENV"
    exit 0
fi

start=$(date +%s)
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
# Keep what rl_lab already installed: the CPU torch, numpy and transformers.
"$PY" -m pip freeze 2>/dev/null | grep -iE '^(torch|numpy|transformers|huggingface.hub|tokenizers|pandas)==' > "$constraints" || true
if ! grep -qi '^torch==' "$constraints"; then
    echo "install_verl.sh: torch is not installed in $VENV; install it first (make setup)" >&2
    exit 2
fi
"$PY" -m pip install -q --no-deps "verl==$VERL_VERSION"
"$PY" -m pip install -q -c "$constraints" ${CONSTRAINTS:+-c "$CONSTRAINTS"} \
    packaging numpy "ray>=2.41" "tensordict>=0.8.0,<=0.10.0,!=0.9.0" omegaconf codetiming transformers
# For the export tests (tests/integration/test_verl_export.py): verl's Hydra config, its RLHFDataset, parquet.
"$PY" -m pip install -q -c "$constraints" ${CONSTRAINTS:+-c "$CONSTRAINTS"} hydra-core datasets pyarrow
if ! check; then
    echo "install_verl.sh: verl $VERL_VERSION installed but its modules do not import:" >&2
    "$PY" -c "import verl.trainer.ppo.rollout_corr_helper, verl.trainer.ppo.core_algos" >&2 || true
    exit 1
fi
echo "verl $VERL_VERSION installed in $VENV in $(( $(date +%s) - start )) s"
