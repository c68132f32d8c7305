# Sourced by tools/install_*.sh: the one test for "this machine has an NVIDIA GPU".
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
