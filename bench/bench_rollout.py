"""Benchmark 3: rollout throughput of the HF engine against the vLLM engine, over model sizes and
batch sizes, on whatever device is here (CPU by default, the GPU if there is one). The HF engine
is measured twice: with its static-cache fast path (rl_lab.engines.fast_decode, the default for Qwen2
models) and with the generic Hugging Face forward (HFEngine.fast = False).

Both engines sample the same prompts with the same settings (temperature 1, up to --new tokens,
stop at <eos>) from the same random-init model built from config, in this one process; each
measurement is the median of --reps timed calls after one warm-up call, and the engines alternate.

    python bench/bench_rollout.py                              # 0.3M, 3M, 30M x batch 16, 64, 256
    python bench/bench_rollout.py --sizes 0.3M --batches 64 --dtype bfloat16
    python bench/bench_rollout.py --batches 64 --new 16 128 512 --forced   # issue 20's long completions

With --forced every completion is exactly --new tokens (<eos> held back: SamplingConfig.min_tokens),
so the engines generate the same number of tokens; with several --new values the script also
prints each engine's fitted exponent b of call time ~ T^b (1: cost linear in the length).

Prints completions/s and generated tokens/s for each engine, HF static / HF generic and vLLM / HF.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from rl_lab import build_model
from rl_lab.config import SamplingConfig
from rl_lab.engines.rollout import HFEngine
from rl_lab.tools.stats import power_law_exponent


def timed(engine, prompts, n, sampling, reps):
    g = torch.Generator().manual_seed(0)
    engine.generate(prompts, n, sampling, g)                                   # warm-up
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        batch = engine.generate(prompts, n, sampling, g)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t, int(batch.completion_mask.sum())))
    secs = statistics.median(s for s, _ in out)
    toks = statistics.median(k for _, k in out)
    return secs, toks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["0.3M", "3M", "30M"])
    ap.add_argument("--batches", nargs="+", type=int, default=[16, 64, 256], help="completions per call")
    ap.add_argument("--new", nargs="+", type=int, default=[16], help="max new tokens (one or several)")
    ap.add_argument("--forced", action="store_true", help="every completion exactly --new tokens")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--model", default=None, help="a local HF model path instead of --sizes")
    a = ap.parse_args()
    from rl_lab.engines.vllm_engine import VLLMEngine, vllm_available
    ok, version = vllm_available()
    if not ok:
        raise SystemExit(f"vLLM does not import here ({version}); run bash tools/install_vllm.sh")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(min(2, torch.get_num_threads()))
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads, vLLM {version}, "
          f"dtype {a.dtype}, {'exactly' if a.forced else 'max'} {a.new} new tokens, median of {a.reps} calls; "
          f"8 completions per prompt; load average {os.getloadavg()[0]:.1f}")
    print(f"{'model':>8} {'params':>8} {'batch':>6} {'T':>4} | {'HF compl/s':>10} {'tok/s':>8} | "
          f"{'HF generic':>10} | static/generic | {'vLLM compl/s':>12} {'tok/s':>8} | vLLM/HF")
    sizes = [a.model] if a.model else a.sizes
    for size in sizes:
        if a.model:
            from transformers import AutoTokenizer

            from rl_lab.models import load_model
            model, tok = load_model(size), AutoTokenizer.from_pretrained(size, padding_side="left")
        else:
            model, tok = build_model(size, seed=0)
        model = model.to(device)
        # a context for the longest completion (rotary embeddings have no hard limit; vLLM reads this)
        model.config.max_position_embeddings = max(model.config.max_position_embeddings, max(a.new) + 16)
        params = sum(p.numel() for p in model.parameters())
        hf = HFEngine(model, tok, a.dtype)
        generic = HFEngine(model, tok, a.dtype)
        generic.fast = False
        vl = VLLMEngine(model.cpu() if device == "cpu" else model, tok, dtype=a.dtype)
        for b in a.batches:
            prompts = [f"{10 + i % 90}+{10 + (7 * i) % 90}=" for i in range(max(1, b // 8))]
            seconds = {"HF": [], "HF generic": [], "vLLM": []}
            for new in a.new:
                sampling = SamplingConfig(max_completion_length=new, min_tokens=new if a.forced else 0)
                hs, ht = timed(hf, prompts, 8, sampling, a.reps)
                gs, _ = timed(generic, prompts, 8, sampling, a.reps)
                vs, vt = timed(vl, prompts, 8, sampling, a.reps)
                for k, v in zip(seconds, (hs, gs, vs)):
                    seconds[k].append(v)
                n = len(prompts) * 8
                print(f"{size:>8} {params / 1e6:7.2f}M {n:6d} {new:4d} | {n / hs:10.1f} {ht / hs:8.0f} | "
                      f"{n / gs:10.1f} | {gs / hs:13.2f}x | {n / vs:12.1f} {vt / vs:8.0f} | {hs / vs:6.2f}x",
                      flush=True)
            if len(a.new) > 1:
                print(f"{'':>8} fitted exponent b of call time ~ T^b over T = {a.new}: " + ", ".join(
                    f"{k} {power_law_exponent(a.new, v):.2f}" for k, v in seconds.items()))
        del vl, hf, generic


if __name__ == "__main__":
    main()
