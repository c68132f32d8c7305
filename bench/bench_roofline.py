"""Benchmark 10: the trainer's forward and backward against this machine's matmul roofline (issue 32).

For each cell of section 5's grid (model 0.3M / 3M / 30M x completion length T) this prints:
* the FLOPs of one training forward + backward over the cell's batch (rows x (P + T) tokens),
  counted from the model's shapes: every linear layer (q, k, v, o, gate, up, down, the tied
  output layer on the T + 1 positions the trainer keeps) and causal attention (half of the
  S x S score and value products, S = P + T); the backward is twice the forward (a gradient for
  the input and one for the weight of every product).  torch's FlopCounterMode counts the same
  linear layers (printed as a check; it does not count CPU attention);
* the roofline: the time those products would take if each ran at the rate this machine
  sustains for a product of exactly its shape (measured here, fp32, median of repetitions),
  so small, thin products are held to what they can reach, not to the peak of a large square
  product (also printed);
* the measured time of rl_lab's training forward + backward (the trainer's `token_logprobs`
  and a backward through the log-probs), its achieved FLOP/s and its fraction of the roofline.
  The forward is the plain one (`share_prefix=False`), the computation the count describes: at
  T = 16 the trainer shares the 7-token prompts (rl_lab.engines.shared_prefix) and skips 27% of
  these tokens, which this table leaves out.

    python bench/bench_roofline.py                        # the 3 x 3 grid (a few minutes)
    python bench/bench_roofline.py --sizes 0.3M --lengths 16 128 --reps 3
    python bench/bench_roofline.py --levers                # + the speed levers, side by side

`step_gemms` adds sampling's products (the prompt's prefill, then one-token decode steps on the
cache; `sampling_gemms`, equal to FlopCounterMode's count of `generate`'s linear layers) to the
training pass's, for bench_long_completions.py's FLOP/s beside its ratios.

`--decode` times the static decoder's one-token step (the sampler's inner loop) eager against
torch.compile, alternating.  `--memory` times the same step against its matrix products alone and
against a plain read of its weights (`decode_memory`): a step that takes about as long as reading
its weights is bound by memory, not arithmetic or overhead.

`--levers` times, in the same run and alternating repetition by repetition, the default path
against each candidate of issue 32 alone (ratios < 1 are faster): `compile` (torch.compile of the
model, inductor; its compile time printed apart), `no_mask` (no attention mask when no row is
padded, so SDPA takes its causal path), and a hand-written forward of the same model (`LeanForward`):
`lean` (Hugging Face's operations in Hugging Face's order, without its modules, mask builder,
keyword plumbing and output classes: the same numbers), and on top of it one change each:
`fused_norm` (torch's one-op `F.rms_norm`), `roll_rotary` (the rotary embedding as one roll with
the sign folded into the sine table, as the static decoder does), `stacked` (q/k/v and gate/up as
one product each, the weights concatenated every pass), `kept_norm` (the final RMSNorm on the
T + 1 positions whose logits are kept, not on every position before dropping the prompt's;
the same values, but its weight's gradient sums fewer rows, so not the same bits).  Each lever's
row says whether its logits and gradients equal the default's bit for bit.  Batches as in bench_long_completions.py (BATCH).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LENGTHS = (16, 128, 512)
SIZES = ("0.3M", "3M", "30M")
BATCH = {"0.3M": (8, 8), "3M": (8, 8), "30M": (2, 8), "0.5B": (8, 8)}   # prompts x generations, as benchmark 5
DEVICE, DTYPE = torch.device("cpu"), torch.float32            # --device, --dtype
PROMPT = 7                                                  # the addition task's prompt tokens
LEVERS = ("compile", "no_mask", "lean", "fused_norm", "roll_rotary", "stacked", "kept_norm")


# --------------------------------------------------------------------------- FLOPs from the shapes
def gemms(config, rows: int, prompt: int, length: int) -> list[tuple[str, int, int, int, int, float]]:
    """The products of one training forward: (name, batch, M, K, N, flops).  Attention is causal:
    its S x S products are listed at their full shape and counted at half their FLOPs."""
    d, L = config.hidden_size, config.num_hidden_layers
    H, kv = config.num_attention_heads, config.num_key_value_heads
    dh, ff, V = d // H, config.intermediate_size, config.vocab_size
    S = prompt + length
    M = rows * S
    out = []
    for name, k, n in (("q", d, H * dh), ("k", d, kv * dh), ("v", d, kv * dh), ("o", H * dh, d),
                       ("gate", d, ff), ("up", d, ff), ("down", ff, d)):
        out.append((name, 1, M, k, n, 2.0 * M * k * n * L))
    out.append(("scores", rows * H, S, dh, S, 2.0 * rows * H * S * S * dh * L / 2))
    out.append(("values", rows * H, S, S, dh, 2.0 * rows * H * S * S * dh * L / 2))
    out.append(("lm_head", 1, rows * (length + 1), d, V, 2.0 * rows * (length + 1) * d * V))
    return out


def sampling_gemms(config, rows: int, prompt: int, length: int) -> list[tuple[str, int, int, int, int, float]]:
    """The products of sampling `length` tokens per row: the prompt's prefill (its last position's
    logits give the first token), then length - 1 one-token decode steps, each attending to the
    cache (S = prompt + t keys at step t).  The decode steps' linear products have one shape (rows
    x K by K x N) and are listed once with their summed FLOPs; their attention is listed at the
    mean cache length, with the exact FLOPs of all steps."""
    out = [(f"prefill_{name}", *rest) for name, *rest in gemms(config, rows, prompt, 0)]
    steps = length - 1
    if steps <= 0:
        return out
    d, L = config.hidden_size, config.num_hidden_layers
    H, kv = config.num_attention_heads, config.num_key_value_heads
    dh, ff, V = d // H, config.intermediate_size, config.vocab_size
    for name, k, n in (("q", d, H * dh), ("k", d, kv * dh), ("v", d, kv * dh), ("o", H * dh, d),
                       ("gate", d, ff), ("up", d, ff), ("down", ff, d)):
        out.append((f"decode_{name}", 1, rows, k, n, 2.0 * rows * k * n * L * steps))
    keys = sum(prompt + t for t in range(1, steps + 1))                # summed over the decode steps
    mean_s = max(1, round(keys / steps))
    out.append(("decode_scores", rows * H, 1, dh, mean_s, 2.0 * rows * H * dh * keys * L))
    out.append(("decode_values", rows * H, 1, mean_s, dh, 2.0 * rows * H * dh * keys * L))
    out.append(("decode_lm_head", 1, rows, d, V, 2.0 * rows * d * V * steps))
    return out


def step_gemms(config, rows: int, prompt: int, length: int) -> dict[str, list]:
    """The model FLOPs of one RL step, as products: sampling, then the trainer's forward and
    backward over every row (the plain computation; sharing the prompt, as rl_lab does, is a way
    to need fewer).  The optimizer's update (a few elementwise passes over the parameters, under
    0.1% of these) is left out."""
    fwd = gemms(config, rows, prompt, length)
    return {"sampling": sampling_gemms(config, rows, prompt, length), "train": fwd + backward_gemms(fwd)}


def backward_gemms(forward):
    """Each product A (M x K) B (K x N) needs dA = dC B^T (M x N x K) and dB = A^T dC (K x M x N)."""
    out = []
    for name, b, m, k, n, f in forward:
        out += [(f"d{name}_in", b, m, n, k, f), (f"d{name}_w", b, k, m, n, f)]
    return out


# --------------------------------------------------------------------------- measured rates
def sync():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def _time(fn, min_time: float = 0.05, reps: int = 5) -> float:
    """Median seconds of one call of fn, each repetition running it long enough to time."""
    fn()
    sync()
    t = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t, 1e-6)
    n = max(1, int(min_time / one))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        times.append((time.perf_counter() - t) / n)
    return statistics.median(times)


_RATES: dict[tuple, float] = {}


def rate(b: int, m: int, k: int, n: int) -> float:
    """FLOP/s this machine sustains for a (b x) M x K by K x N product (DTYPE, on DEVICE)."""
    key = (b, m, k, n)
    if key not in _RATES:
        x, y = (torch.randn(b, m, k, device=DEVICE, dtype=DTYPE), torch.randn(b, k, n, device=DEVICE, dtype=DTYPE))
        fn = (lambda: torch.mm(x[0], y[0])) if b == 1 else (lambda: torch.bmm(x, y))
        _RATES[key] = 2.0 * b * m * k * n / _time(fn)
    return _RATES[key]


def roofline_time(products) -> float:
    """Seconds the products take, each at the rate measured for its shape."""
    return sum(f / rate(b, m, k, n) for _, b, m, k, n, f in products)


def square_peak(n: int = 1024) -> float:
    return rate(1, n, n, n)


# --------------------------------------------------------------------------- rl_lab's forward + backward
def batch(size: str, length: int, seed: int = 0):
    """A model of the size and a forced-length batch of addition prompts: (model, inputs)."""
    from rl_lab.models import build_model
    from rl_lab.tasks import get_task
    model, tok = build_model(size, seed=seed)
    model = model.to(DEVICE, DTYPE)
    prompts, gens = BATCH[size]
    task = get_task("addition")
    rng = np.random.default_rng(seed)
    examples = [task.sample(rng) for _ in range(prompts)]
    enc = tok([e["prompt"] for e in examples for _ in range(gens)], return_tensors="pt", padding=True)
    g = torch.Generator().manual_seed(seed)
    completion = torch.randint(4, model.config.vocab_size, (prompts * gens, length), generator=g)
    return model, (enc["input_ids"].to(DEVICE), enc["attention_mask"].to(DEVICE), completion.to(DEVICE))


class LeanForward:
    """The model's forward written out by hand (Qwen2 layout), called as the trainer calls the model
    for its plain forward: `(input_ids, attention_mask, position_ids, logits_to_keep).logits`.
    With no option it runs Hugging Face's operations in Hugging Face's order (the same numbers);
    each option changes one thing (the `--levers` of the same names)."""

    OPTIONS = ("fused_norm", "roll_rotary", "stacked", "kept_norm")

    def __init__(self, model, *options: str):
        self.model, self.options = model, set(options)

    def norm(self, x, weight, eps):
        if "fused_norm" in self.options:
            return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    def __call__(self, input_ids, attention_mask, position_ids, logits_to_keep: int):
        F = torch.nn.functional
        core, cfg = self.model.model, self.model.config
        B, S = input_ids.shape
        H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
        D, G, eps = cfg.hidden_size // H, H // Hkv, core.norm.variance_epsilon
        h = core.embed_tokens(input_ids)                                             # (B, S, E)
        cos, sin = (t[:, None] for t in core.rotary_emb(h, position_ids))            # (B, 1, S, D)
        sin_signed = torch.cat([-sin[..., : D // 2], sin[..., D // 2:]], -1)
        mask = None                                    # no padded row: SDPA's causal path, as HF
        if not bool(attention_mask.all()):             # (B, 1, S, S) bool: causal and not padding
            causal = torch.ones(S, S, dtype=torch.bool, device=h.device).tril()
            mask = (causal[None] & attention_mask.bool()[:, None, :])[:, None]
        for layer in core.layers:
            a, m = layer.self_attn, layer.mlp
            x = self.norm(h, layer.input_layernorm.weight, eps)                      # (B, S, E)
            if "stacked" in self.options:
                qkv = F.linear(x, torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                               torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
                q, k, v = qkv.view(B, S, -1, D).transpose(1, 2).split([H, Hkv, Hkv], 1)
            else:
                q, k, v = (F.linear(x, p.weight, p.bias).view(B, S, -1, D).transpose(1, 2)
                           for p in (a.q_proj, a.k_proj, a.v_proj))                  # (B, H|Hkv, S, D)
            if "roll_rotary" in self.options:
                q, k = (t * cos + t.roll(D // 2, -1) * sin_signed for t in (q, k))
            else:
                q, k = (t * cos + torch.cat((-t[..., D // 2:], t[..., : D // 2]), -1) * sin for t in (q, k))
            if mask is None:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=a.scaling,
                                                   enable_gqa=G > 1)
            else:                                      # HF repeats the key/value heads under a mask
                k, v = (t[:, :, None].expand(B, Hkv, G, S, D).reshape(B, H, S, D) for t in (k, v))
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=a.scaling)
            h = h + F.linear(o.transpose(1, 2).contiguous().reshape(B, S, -1), a.o_proj.weight, a.o_proj.bias)
            x = self.norm(h, layer.post_attention_layernorm.weight, eps)
            if "stacked" in self.options:
                gate, up = F.linear(x, torch.cat([m.gate_proj.weight, m.up_proj.weight])).chunk(2, -1)
            else:
                gate, up = F.linear(x, m.gate_proj.weight), F.linear(x, m.up_proj.weight)
            h = h + F.linear(m.act_fn(gate) * up, m.down_proj.weight)                 # (B, S, E)
        if "kept_norm" in self.options:                # the final norm on the kept positions only
            h = self.norm(h[:, -logits_to_keep:], core.norm.weight, eps)
        else:                                          # HF: every position, then the kept ones
            h = self.norm(h, core.norm.weight, eps)[:, -logits_to_keep:]
        return types.SimpleNamespace(logits=self.model.lm_head(h))                   # (B, keep, V)


def train_pass(model, inputs, no_mask: bool = False, with_grads: bool = False):
    """The trainer's forward (token_logprobs, with entropy) and a backward through its log-probs.
    `model` may be a `LeanForward`; with_grads: return (log-probs, the parameters' gradients)."""
    from rl_lab.algos.losses import token_logprobs
    prompt_ids, prompt_mask, completion = inputs
    if no_mask and bool(prompt_mask.all()):    # no row padded: no mask, so SDPA takes its causal path
        logits = model(input_ids=torch.cat([prompt_ids, completion], 1),
                       logits_to_keep=completion.shape[1] + 1).logits[:, :-1].float()        # (B, T, V)
        logp_all = torch.log_softmax(logits, -1)
        logp = logp_all.gather(-1, completion[..., None]).squeeze(-1)                     # (B, T)
        with torch.no_grad():
            torch.special.entr(logp_all.exp()).sum(-1)
    else:
        logp = token_logprobs(model, prompt_ids, prompt_mask, completion, with_entropy=True,
                              share_prefix=False).logp
    logp.sum().backward()
    module = model.model if isinstance(model, LeanForward) else model
    grads = [p.grad.clone() for p in module.parameters()] if with_grads else None
    module.zero_grad(set_to_none=True)
    return (logp.detach(), grads) if with_grads else None


def counted_flops(model, inputs) -> float:
    """FLOPs of one forward + backward as torch's FlopCounterMode counts them (linear layers)."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as fc:
        train_pass(model, inputs)
    return float(fc.get_total_flops())


# --------------------------------------------------------------------------- the table
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(BATCH))
    ap.add_argument("--lengths", nargs="+", type=int, default=list(LENGTHS))
    ap.add_argument("--reps", type=int, default=5, help="timed forward + backward passes per cell and lever")
    ap.add_argument("--threads", type=int, default=2, help="torch threads on the CPU")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (bench/gpu_bench.sh)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--levers", nargs="*", default=None, metavar="LEVER",
                    help=f"time levers side by side with the default, from {LEVERS} (no names: all)")
    ap.add_argument("--decode", action="store_true", help="also the static decoder's step under torch.compile")
    ap.add_argument("--memory", action="store_true",
                    help="also the decode step against the time to read its weights from memory")
    args = ap.parse_args()
    global DEVICE, DTYPE
    DEVICE, DTYPE = torch.device(args.device), getattr(torch, args.dtype)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    levers = None if args.levers is None else (args.levers or list(LEVERS))
    peak = square_peak()
    where = (torch.cuda.get_device_name(0) if DEVICE.type == "cuda"
             else f"{args.threads} threads, CPU {torch.backends.cpu.get_cpu_capability()}")
    print(f"torch {torch.__version__}, {where}; {args.dtype} 1024^3 product: {peak / 1e9:.1f} GFLOP/s")
    print(f"\n{'model':>5} {'T':>4} {'rows':>4} | {'GFLOP':>7} {'counted':>7} | {'roofline':>9} {'GFLOP/s':>7} | "
          f"{'rl_lab':>8} {'GFLOP/s':>7} {'of roof':>7} {'of peak':>7}")
    lever_rows = []
    for size in args.sizes:
        for length in args.lengths:
            model, inputs = batch(size, length)
            rows = inputs[0].shape[0]
            fwd = gemms(model.config, rows, inputs[0].shape[1], length)
            products = fwd + backward_gemms(fwd)
            flops = sum(p[-1] for p in products)
            linear = sum(p[-1] for p in products if p[0].lstrip("d").split("_")[0] not in ("scores", "values"))
            counted = counted_flops(model, inputs)
            roof = roofline_time(products)
            t = statistics.median(_time(lambda: train_pass(model, inputs), min_time=0.0, reps=1)
                                  for _ in range(args.reps))
            print(f"{size:>5} {length:>4} {rows:>4} | {flops / 1e9:7.2f} {counted / linear:6.3f}x | "
                  f"{roof:8.3f}s {flops / roof / 1e9:7.1f} | {t:7.3f}s {flops / t / 1e9:7.1f} "
                  f"{roof / t:6.0%} {flops / t / peak:6.0%}")
            if levers:
                lever_rows.append((size, length, *compare_levers(model, inputs, levers, args.reps)))
    if args.decode:
        print("\nthe static decoder's step under torch.compile (compiled / eager time, alternating):")
        for size in args.sizes:
            rows = BATCH[size][0] * BATCH[size][1]
            eager, r, first, diff = compare_decode(size, rows)
            print(f"  {size:>5} {rows} rows: eager {eager * 1e3:.2f} ms/step, compiled {r:.2f}x, "
                  f"first call {first:.1f} s, max |logit difference| {diff:.1e}")
    if args.memory:
        print("\nthe static decoder's step against reading its weights (medians of alternating repetitions):")
        for size in args.sizes:
            rows = BATCH[size][0] * BATCH[size][1]
            m = decode_memory(size, rows, reps=max(3, args.reps))
            print(f"  {size:>5} {rows} rows, {m['bytes'] / 1e6:.1f} MB of weights: step {m['step'] * 1e3:.2f} ms; "
                  f"its products alone {m['linear'] * 1e3:.2f} ms, weight @ rows^T {m['weights_first'] * 1e3:.2f} ms, "
                  f"input-major {m['input_major'] * 1e3:.2f} ms; "
                  f"reading the weights {m['read'] * 1e3:.2f} ms ({m['bytes'] / m['read'] / 1e9:.1f} GB/s): "
                  f"the step at {m['read'] / m['step']:.0%} of the read's rate")
    if lever_rows:
        print("\nlevers: time / default's time, median of alternating repetitions (quartiles); "
              "compile's first call apart")
        for size, length, ratios, first in lever_rows:
            cells = ", ".join(f"{k} {m:.2f}x ({lo:.2f}-{hi:.2f}{'' if same else ', not bitwise'})"
                              for k, (m, lo, hi, same) in ratios.items())
            extra = f"; compile's first call {first:.1f} s" if first is not None else ""
            print(f"  {size:>5} T={length:<4} {cells}{extra}")


def compare_levers(model, inputs, names, reps):
    """Each lever against the default, alternating, after a warm-up (compile's is timed apart)."""
    first = None
    runs = {"default": (model, False)}
    for name in names:
        if name == "compile":
            torch._dynamo.reset()          # each cell compiles afresh: no recompile limit across cells
            compiled = torch.compile(model, dynamic=False)
            t = time.perf_counter()
            train_pass(compiled, inputs)
            sync()
            first = time.perf_counter() - t
            runs[name] = (compiled, False)
        elif name == "no_mask":
            runs[name] = (model, True)
        elif name == "lean" or name in LeanForward.OPTIONS:
            runs[name] = (LeanForward(model, *([] if name == "lean" else [name])), False)
        else:
            raise SystemExit(f"unknown lever {name!r}: choose from {LEVERS}")
    exact = {}
    logp, grads = train_pass(model, inputs, with_grads=True)
    for k, (m, no_mask) in runs.items():      # the warm-up, and is it the default's numbers exactly?
        lp, g = train_pass(m, inputs, no_mask, with_grads=True)
        exact[k] = torch.equal(lp, logp) and all(torch.equal(a, b) for a, b in zip(g, grads))
    times = {k: [] for k in runs}
    for _ in range(reps):
        for k, (m, no_mask) in runs.items():
            t = time.perf_counter()
            train_pass(m, inputs, no_mask)
            sync()
            times[k].append(time.perf_counter() - t)
    ratios = {}
    for k in names:
        r = [a / b for a, b in zip(times[k], times["default"])]
        q = statistics.quantiles(r, n=4, method="inclusive") if len(r) > 1 else [r[0], r[0], r[0]]
        ratios[k] = (statistics.median(r), q[0], q[2], exact[k])
    return ratios, first


def decode_step_args(size: str, rows: int) -> tuple:
    """`fast_decode.decode_step`'s arguments for a model of the size: a static decoder over `rows`
    rows, prefilled with random 7-token prompts and stepped 50 tokens (57 in its cache, one 64-key
    block), and the next token to decode."""
    from rl_lab.engines import fast_decode
    from rl_lab.models import build_model
    model, _ = build_model(size, seed=0)
    dec = fast_decode.StaticDecoder(model.to(DEVICE, DTYPE), rows, 128)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, model.config.vocab_size, (rows, PROMPT), generator=g).to(DEVICE)
    dec.prefill(ids, torch.ones_like(ids), torch.arange(PROMPT, device=DEVICE)[None].repeat(rows, 1))
    for _ in range(50):
        dec.step(torch.randint(4, model.config.vocab_size, (rows,), generator=g).to(DEVICE),
                 torch.full((rows,), dec.length, device=DEVICE))
    return (dec.weights, dec.k, dec.v, dec.key_ok[:, :64], dec.indices[dec.length],
            torch.randint(4, model.config.vocab_size, (rows,), generator=g).to(DEVICE),
            torch.full((rows,), dec.length, device=DEVICE))


def compare_decode(size: str, rows: int, reps: int = 7, calls: int = 20) -> tuple[float, float, float, float]:
    """The static decoder's one-token step (rl_lab.engines.fast_decode.decode_step) eager and under
    torch.compile, alternating, 57 tokens into the cache (one 64-key block): (eager seconds per
    step, compiled / eager, compile's first call in seconds, max |logit difference|)."""
    from rl_lab.engines import fast_decode
    args = decode_step_args(size, rows)
    torch._dynamo.reset()
    compiled = torch.compile(fast_decode.decode_step, dynamic=False)
    with torch.no_grad():
        eager_out = fast_decode.decode_step(*args)
        t = time.perf_counter()
        diff = (compiled(*args) - eager_out).abs().max().item()
        sync()
        first = time.perf_counter() - t
        times = {"eager": [], "compiled": []}
        for _ in range(reps):
            for name, fn in (("eager", fast_decode.decode_step), ("compiled", compiled)):
                t = time.perf_counter()
                for _ in range(calls):
                    fn(*args)
                sync()
                times[name].append((time.perf_counter() - t) / calls)
    ratio = statistics.median(c / e for c, e in zip(times["compiled"], times["eager"]))
    return statistics.median(times["eager"]), ratio, first, diff


def decode_memory(size: str, rows: int, reps: int = 5, calls: int = 10) -> dict[str, float]:
    """A one-token decode step reads every weight once for `rows` tokens: is it bound by memory?
    Times, alternating, per call: the static decoder's step (57 tokens into its cache, in the order
    of products it chooses: `fast_decode.WEIGHTS_FIRST_BYTES`), its matrix products alone in
    F.linear's order (rows @ weight^T, each weight matrix in turn), the same products as
    weight @ rows^T (`weights_first`), and with each weight stored input-major ((in, out)
    contiguous, rows @ W), and a plain read of those weights (a sum over each: the memory's rate,
    no arithmetic to speak of).  Seconds, and the bytes read."""
    from rl_lab.engines import fast_decode
    args = decode_step_args(size, rows)
    w = args[0]
    mats = [m for layer in w.layers for m in (layer.qkv_weight, layer.o_weight, layer.gate_up_weight,
                                              layer.down_weight)] + [w.lm_head]    # (out, in) each
    xs = {m.shape[1]: torch.randn(rows, m.shape[1], device=DEVICE, dtype=DTYPE) for m in mats}   # (B, in)
    major = [m.t().contiguous() for m in mats]                                       # (in, out) each
    runs = {"step": lambda: fast_decode.decode_step(*args),
            "linear": lambda: [torch.nn.functional.linear(xs[m.shape[1]], m) for m in mats],
            "weights_first": lambda: [torch.mm(m, xs[m.shape[1]].t()) for m in mats],
            "input_major": lambda: [torch.mm(xs[m.shape[0]], m) for m in major],
            "read": lambda: [m.sum() for m in mats]}
    times = {k: [] for k in runs}
    with torch.no_grad():
        for fn in runs.values():
            fn()
        for _ in range(reps):
            for k, fn in runs.items():
                t = time.perf_counter()
                for _ in range(calls):
                    fn()
                sync()
                times[k].append((time.perf_counter() - t) / calls)
    out = {k: statistics.median(v) for k, v in times.items()}
    out["bytes"] = float(sum(m.numel() * m.element_size() for m in mats))
    return out


if __name__ == "__main__":
    main()
