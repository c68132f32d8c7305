#!/usr/bin/env bash
# Rewrite rl_lab/constraints.txt (the tested environment) from a venv that `make setup` has just
# built on a fresh clone:  bash tools/lock.sh [VENV]
# Keeps the header, drops the editable rl_lab itself, and writes torch without its local label
# (+cpu), so the same pin holds for the CPU wheel and PyPI's CUDA build.
set -euo pipefail
VENV="${1:-.venv}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=rl_lab/constraints.txt
header="$(sed -n '/^#/p' "$out")"
{ echo "$header"; "$VENV/bin/python" -m pip freeze --exclude-editable 2>/dev/null | sed -E 's/^(torch==[^+]*)\+.*/\1/'; } > "$out.new"
mv "$out.new" "$out"
echo "lock: $(grep -c '==' "$out") packages in $out"
