"""The trainer's methods, in the order their hooks run (rl_lab.algos.method explains the hooks).

Adding a method: a `Method` subclass in its own module, and one line in METHODS.  The order is
part of the result: the per-token loss terms are added, and the token masks applied, in this
order (tests/test_golden_methods.py holds every method to its pre-refactor numbers bit for bit).
Core mechanisms stay in the step: the rollout, the validity checks, the correction hook in its
two modes (decoupled / bypass), the advantage estimator (rl_lab.algos.estimators), PPO's loss
and the optimizer.
"""
from __future__ import annotations

from rl_lab.algos.empg import EMPG
from rl_lab.algos.hybrid import Imitation, TeacherKL
from rl_lab.algos.method import Method
from rl_lab.algos.reference_kl import ReferenceKL
from rl_lab.algos.simpletir import ToolTokenStats, VoidFilter
from rl_lab.algos.token_masks import DVP, TruncationMask
from rl_lab.algos.turn_metrics import TurnRewardMetrics
from rl_lab.algos.zero_spread import DynamicSampling, ZeroSpreadSkip

METHODS: tuple[type[Method], ...] = (
    TruncationMask,     # mask_tokens: truncated completions leave the objective
    DVP,                # mask_tokens: tokens outside pi's pruned vocabulary leave it
    VoidFilter,         # filter_rows: SimpleTIR's void-turn filter
    DynamicSampling,    # rollout_prompts, filter_rows, skip_update: DAPO's zero-spread group filter
    ZeroSpreadSkip,     # skip_update: no optimizer step when no group has reward spread
    EMPG,               # advantages: entropy-modulated per turn
    ReferenceKL,        # token_loss: beta x k3 to the reference policy
    TeacherKL,          # token_loss: KL(pi || teacher), dense (hybrid RL/IL)
    Imitation,          # batch_loss: NLL of demonstrations (hybrid RL/IL)
    ToolTokenStats,     # metrics: SimpleTIR's low-probability tokens after tool outputs
    TurnRewardMetrics,  # metrics: per-turn rewards of multi-turn episodes
)


def build_methods(config) -> list[Method]:
    """The methods the RLConfig turns on, in METHODS order."""
    return [cls(config) for cls in METHODS if cls.active(config)]
