#!/usr/bin/env bash
# The pin of package $1 in rl_lab/constraints.txt (the tested environment), without a local label.
locked_version() {
  sed -nE "s/^$1==([^+]*).*/\1/p" "$(dirname "${BASH_SOURCE[0]}")/../rl_lab/constraints.txt"
}
