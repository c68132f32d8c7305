"""Policy variance on an enumerable sequence space ("The Variance of Thought", chapter 9).

Generating a completion token by token is a deterministic MDP: the state is the prefix c, the
action the next token a, and the next state is c + a.  With a terminal reward R(y):

  Q(c, a)  = E_pi[R | prefix c, next token a]        (n_contexts, V)
  V(c)     = sum_a pi(a | c) Q(c, a)                  (n_contexts,)
  sigma2(c) = Var_{a ~ pi(.|c)} Q(c, a)               the policy variance at c

Three statements, each checked exactly in lab 9:
  * Var_pi(R) = sum_c d(c) sigma2(c), with d(c) the probability of reaching c: in a deterministic
    MDP the return's variance is injected only where the policy chooses (R - V(root) is a sum of
    martingale differences Q(c_t, a_t) - V(c_t)).
  * for Q in [0, 1], sigma2(c) <= (1 - sum_a pi(a|c)^2) / 2, half the Gini impurity, computable
    from the logits alone; equality on a two-point fork with Q in {0, 1}.
  * discovery budget: an action with advantage A = Q - V >= c > 0 has probability at most
    sigma2 / (sigma2 + c^2) (Cantelli), so seeing it takes at least 1 + c^2 / sigma2 draws in
    expectation; on the two-point fork (good action with probability p, Q in {0, 1}) the expected
    number of bad draws before the first good one is (1 - p) / p = c^2 / sigma2 exactly.
"""
from __future__ import annotations

import torch

from rl_lab.exact.space import SequenceSpace


def _q_from(space: SequenceSpace, seq_p: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
    mass = space.subtree_sum(seq_p)                                    # (n_contexts, V) P(reach c + a)
    return space.subtree_sum(seq_p * reward) / mass


def q_values(space: SequenceSpace, logp: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
    """(n_contexts, V) log pi(a | c), (N,) terminal reward -> (n_contexts, V) Q(c, a): the expected
    reward of the sequences through node c + a, under pi from there on."""
    return _q_from(space, space.prefix_probs(logp)[1], reward)


def policy_variance(space: SequenceSpace, logp: torch.Tensor, reward: torch.Tensor):
    """-> (V(c) (n_contexts,), sigma2(c) (n_contexts,), d(c) (n_contexts,) reach probabilities)."""
    reach, seq_p = space.prefix_probs(logp)                            # (n_contexts,), (N,)
    q = _q_from(space, seq_p, reward)                                  # (n_contexts, V)
    p = logp.exp()
    value = (p * q).sum(-1)                                            # (n_contexts,)
    sigma2 = (p * (q - value[:, None]) ** 2).sum(-1)                   # (n_contexts,)
    return value, sigma2, reach


def gini_bound(logp: torch.Tensor) -> torch.Tensor:
    """(n_contexts, V) -> (n_contexts,) (1 - sum_a pi(a|c)^2) / 2: the largest policy variance any
    reward in [0, 1] can produce at c."""
    return 0.5 * (1 - (2 * logp).exp().sum(-1))
