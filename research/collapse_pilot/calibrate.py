"""Calibrate Geo-RS and TRM thresholds as lab 5 does (each mask keeps KEEP = 80% of sequences;
TRM's two tests sqrt(KEEP) each), on the batches of an UNCORRECTED run of the Stage-B cell.

    python research/collapse_pilot/calibrate.py <steps> key=value ...   (RLConfig fields)

Runs the uncorrected trainer for <steps> steps, records log(pi_old/mu) and the mask that the
correction hook receives at every step, and prints the median over steps [steps//2, steps) of
each step's quantile threshold (the mismatch of a stale sampler is zero at step 1 and grows)."""
import math
import sys

import numpy as np
import torch
import yaml

import rl_lab.trainer as T
from rl_lab.presets import get_preset
from rl_lab.toolkits.compare import quantile_threshold

KEEP = 0.8
steps = int(sys.argv[1])
fields = {k: yaml.safe_load(v) for k, v in (a.split("=", 1) for a in sys.argv[2:])}
torch.set_num_threads(1)
cfg = get_preset("smoke", **fields, max_steps=steps, progress_bar=False)
captured = []
orig = T.rollout_correction


def spy(old_logp, rollout_logp, mask, **kw):
    captured.append(((old_logp - rollout_logp).detach().clone(), mask.clone().float()))
    return orig(old_logp, rollout_logp, mask, **kw)


T.rollout_correction = spy
tr = T.Trainer(cfg)
for _ in range(steps):
    tr.step()
late = captured[steps // 2:]
geo = np.median([quantile_threshold(lr * m, m, "seq_mean_k1", KEEP) for lr, m in late])
trm_avg = np.median([quantile_threshold(lr * m, m, "seq_mean_k3", math.sqrt(KEEP)) for lr, m in late])
trm_max = np.median([quantile_threshold(lr * m, m, "seq_max_k2", math.sqrt(KEEP)) for lr, m in late])
print(yaml.safe_dump({"geo": f"{geo:.4f}", "trm_avg": f"{trm_avg:.4g}", "trm_max": f"{trm_max:.4g}"}))
