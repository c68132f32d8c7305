"""Precision: the sampler's matrix products in bfloat16 or float16, the trainer's in float32.

Mirrors an inference engine in bf16 (vLLM's and SGLang's default) beside a trainer that keeps fp32
master weights: the same weights, products rounded to a 7-bit (bf16) or 10-bit (fp16) mantissa.
Here the sampler's forward runs under torch.autocast(dtype): the linear layers and attention
products in `dtype` with fp32 accumulation, RMSNorm and the softmax in fp32 (the residual stream
stays fp32), as a mixed-precision engine does.

Knobs and fixes (rl_lab.mismatch_specs.PrecisionConfig):
  lm_head="float32"  the sampler's LM head runs outside autocast, in fp32 on its fp32 hidden state
                     (MiniMax-M1, ScaleRL; TRL's cast_lm_head_to_fp32; verl's automodel engine's
                     lm_head_precision): the logits lose no precision in the last product, the
                     layers below still round.  A partial fix.
  fix="same_dtype"   the trainer's forward runs under the same autocast and head (Qi et al. 2025,
                     "FP16 on both engines"; verl: rollout.dtype and the actor's fsdp_config.dtype
                     both float16, with its grad scaler; TRL: fp16=True): both sides compute the same
                     products, so the mismatch is exactly 0.  The gradient then flows through fp16
                     products too; rl_lab uses no loss scaler (the tiny models' gradients do not
                     underflow at this size; verl scales the loss).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from rl_lab.engines.sources.base import Source, compose, patched_linears

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _fp32_head(module, x):
    """The LM head outside autocast: float32 products on the float32 hidden state."""
    with torch.autocast(device_type=x.device.type, enabled=False):
        return F.linear(x.float(), module.weight.float(), None if module.bias is None else module.bias.float())


def low_precision(model, dtype: str, lm_head: str):
    """The context of a forward in `dtype` (autocast), with the head in fp32 if asked."""
    device = next(model.parameters()).device.type
    head = (patched_linears(model, _fp32_head, lambda name: name == "lm_head") if lm_head == "float32"
            else contextlib.nullcontext())
    return compose([torch.autocast(device_type=device, dtype=DTYPES[dtype]), head])


class Precision(Source):
    name = "precision"

    def sampler_forward(self, model):
        return low_precision(model, self.knobs.dtype, self.knobs.lm_head)

    def trainer_forward(self):
        if self.knobs.fix != "same_dtype":
            return None
        knobs = self.knobs
        return lambda model: low_precision(model, knobs.dtype, knobs.lm_head)
