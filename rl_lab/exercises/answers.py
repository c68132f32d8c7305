"""The checks of the exercises whose answer is a number, a formula or a small function.

One function per exercise, registered under its name: "lab01.1" is lab 1's exercise 1, "ch05.3"
chapter 5's exercise 3 (its check cell is in the chapter's lab), "lab_when_speed_kills.1" an
unnumbered lab's.  Every expected value is computed here from the package (the trainer's advantage
function, the exact enumerations, the schedules, the information toolkit, a sandbox run, a training
step), not typed in; where an answer is a derivation's closed form, the check evaluates the
reader's formula against a computation that does not use it (an enumeration, autograd, a search).
Nothing here prints an expected value: a wrong answer gets what is wrong with it (checking.py).
"""
from __future__ import annotations

import itertools
import math
from statistics import NormalDist
from types import SimpleNamespace

import numpy as np
import torch

from rl_lab.exercises.checking import Wrong, as_array, compare, compare_function, exercise, sequence_of

F64 = torch.float64


def _t(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=F64)


def _minimise(f, lo: float, hi: float, iters: int = 200) -> float:
    """Golden-section search for the minimiser of a unimodal f on [lo, hi], in log space."""
    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(iters):
        if f(math.exp(c)) < f(math.exp(d)):
            b, d = d, c
            c = b - g * (b - a)
        else:
            a, c = c, d
            d = a + g * (b - a)
    return math.exp((a + b) / 2)


def _bisect(f, lo: float, hi: float, iters: int = 200, log: bool = False) -> float:
    """A root of f on [lo, hi] (f(lo), f(hi) of opposite signs)."""
    flo = f(lo)
    for _ in range(iters):
        mid = math.sqrt(lo * hi) if log else (lo + hi) / 2
        if (f(mid) > 0) == (flo > 0):
            lo, flo = mid, f(mid)
        else:
            hi = mid
    return math.sqrt(lo * hi) if log else (lo + hi) / 2


# ------------------------------------------------------------------------------------ lab 1, chapter 1


def _zero_spread_probability(p: float, G: int) -> float:
    """P(a group of G rewards, each 1 with probability p, has no spread), by enumerating every
    outcome and asking the package's group_spread."""
    from rl_lab.algos.zero_spread import group_spread

    outcomes = torch.tensor(list(itertools.product((0.0, 1.0), repeat=G)), dtype=F64)     # (2^G, G)
    n = len(outcomes)
    spread = group_spread(outcomes.reshape(-1), torch.arange(n).repeat_interleave(G),
                          torch.ones(n * G, dtype=torch.bool))                           # (2^G,)
    prob = (outcomes * p + (1 - outcomes) * (1 - p)).prod(-1)
    return float(prob[spread == 0].sum())


@exercise("lab01.1", "the fraction of groups with no reward spread, as a function of p and G")
def _lab01_1(answer):
    compare_function(answer, _zero_spread_probability,
                     [(0.5, 2), (0.5, 8), (0.9, 8), (0.3, 4), (0.05, 6), (1.0, 4)], rtol=1e-9)


@exercise("ch01.2", "the advantages of rewards (1, 0, 0, 0) under (a) grpo without scaling, "
          "(b) grpo with group scaling, (c) rloo")
def _ch01_2(answer):
    from rl_lab.algos.losses import group_advantages

    r, ids = _t([1.0, 0.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long)
    expected = [group_advantages(r, ids, scale_rewards="none"), group_advantages(r, ids, scale_rewards="group"),
                group_advantages(r, ids, estimator="rloo")]
    for part, got, want in zip("abc", sequence_of(answer, 3, "the answer (a, b, c)"), expected):
        compare(got, want, f"({part})", rtol=1e-5, atol=1e-9)


@exercise("ch01.3", "the size of the gradient weight on one token of the correct and of the wrong "
          "completion, for each aggregation mode (a = 1)")
def _ch01_3(answer):
    from rl_lab.algos.losses import aggregate_loss, policy_loss

    modes = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
    if not isinstance(answer, dict) or set(answer) != set(modes):
        raise Wrong(f"give a dict with the keys {modes}, each (weight on a correct token, weight on a wrong token).")
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[0, :2], mask[1, :6] = True, True                            # 2 correct tokens, 6 wrong ones
    for mode in modes:
        logp = torch.zeros(2, 8, dtype=F64, requires_grad=True)
        per_token, _ = policy_loss(logp, logp.detach(), _t([1.0, -1.0]), mask, loss="reinforce")
        (grad,) = torch.autograd.grad(aggregate_loss(per_token, mask, mode, norm_length=8), logp)
        compare(sequence_of(answer[mode], 2, f"answer[{mode!r}]"), grad[[0, 1], [0, 0]].abs(),
                f"the weights for {mode}", rtol=1e-6)


@exercise("ch01.5", "(c) the probability that a group of 8 teaches nothing, at p = 0.5 and at p = 0.9")
def _ch01_5(answer):
    got = sequence_of(answer, 2, "the answer (at p = 0.5, at p = 0.9)")
    compare(got[0], _zero_spread_probability(0.5, 8), "the value at p = 0.5", rtol=1e-3)
    compare(got[1], _zero_spread_probability(0.9, 8), "the value at p = 0.9", rtol=1e-2)


# ------------------------------------------------------------------------------------ lab 2, chapter 2


@exercise("lab02.1", "the naive estimator's cosines for b = 0, b = E_mu[R] and b = 1 with the over-sampling sampler")
def _lab02_1(answer, space, policy, reward):
    from rl_lab.exact import Estimator, ExactProblem, behaviour_logits, exact_moments

    problem = ExactProblem(space, policy, behaviour_logits(space, policy, "shift", +1.0), reward)
    b_mu = float((problem.p_mu * problem.reward).sum())
    want = [exact_moments(problem, Estimator("naive", baseline=b)).cosine for b in (0.0, b_mu, 1.0)]
    got = [as_array(x, "a cosine") for x in sequence_of(answer, 3, "the answer (b = 0, b = E_mu[R], b = 1)")]
    for label, g, w in zip(("b = 0", "b = E_mu[R]", "b = 1"), got, want):
        if g.size != 1:
            raise Wrong(f"the cosine for {label} should be one number.")
        if np.sign(float(g)) != np.sign(w):
            raise Wrong(f"the cosine for {label} has the wrong sign (did you build the problem with "
                        "behaviour_logits(space, policy, \"shift\", +1.0)?).")
        compare(g, w, f"the cosine for {label}", rtol=1e-4, atol=1e-9)


def _best_step_reference(inner, second, L):
    from rl_lab.exact import best_step

    grad = _t([1.0, 0.0])                                   # ||grad J|| = 1
    mean = _t([inner, 0.0])
    m = SimpleNamespace(mean=mean, bias=mean - grad, var=second - inner ** 2)
    return best_step(m, L)


@exercise("lab02.2", "eta* and the bound at eta*, from <grad J, E g> , E||g||^2 and L")
def _lab02_2(answer):
    cases = [(0.5, 2.0, 3.0), (1.0, 1.5, 1.0), (0.2, 0.1, 10.0), (0.9, 0.81, 0.5), (-0.3, 1.0, 2.0)]
    compare_function(answer, _best_step_reference, cases, "your best_step", rtol=1e-9)


@exercise("lab02.3", "mu(z) with chi^2 = 100 when pi(z) = 1e-3, and the total variation then")
def _lab02_3(answer):
    from rl_lab.exact import chi2, tv

    pz = 1e-3
    lp = torch.log(_t([pz, 1 - pz]))

    def lq(m):
        return torch.log(_t([m, 1 - m]))

    mu = _bisect(lambda m: float(chi2(lp, lq(m))) - 100.0, 1e-15, pz, log=True)
    got = sequence_of(answer, 2, "the answer (mu(z), TV)")
    compare(got[0], mu, "mu(z)", rtol=1e-3)
    compare(got[1], float(tv(lp, lq(mu))), "the total variation", rtol=1e-3)


def _matching_batch(var_big, var_small, grad_norm=1.0):
    """The batch B at which an unbiased estimator of variance var_big matches one of variance
    var_small at B = 1 (the lemma's efficiency, solved by bisection)."""
    g2 = grad_norm ** 2

    def eff(var, B):
        return g2 / (g2 + var / B)

    target = eff(var_small, 1.0)
    return _bisect(lambda B: eff(var_big, B) - target, 1e-9, 1e12, log=True)


@exercise("lab02.4", "the batch at which sequence-IS matches on-policy REINFORCE at B = 1, "
          "from the two variances and ||grad J||")
def _lab02_4(answer):
    compare_function(answer, _matching_batch, [(10.0, 1.0, 1.0), (50.0, 2.0, 0.3), (3.0, 3.0, 2.0),
                                               (1e4, 0.5, 0.05)], "your batch size", rtol=1e-6)


@exercise("ch02.4", "the per-context TV (about) and the lower bound on chi^2")
def _ch02_4(answer):
    from rl_lab.exact import chi2, tv

    lp = torch.log(_t([1e-2, 0.5 - 1e-2, 0.5]))             # the trainer: the token at 1e-2
    lq = torch.log(_t([1e-6, 0.5 - 1e-6, 0.5]))             # the sampler: 1e-6, the mass moved aside
    got = sequence_of(answer, 2, "the answer (TV, chi^2 bound)")
    compare(got[0], float(tv(lp, lq)), "the TV", rtol=1e-2)
    floor = float(lp[0].exp() ** 2 / lq[0].exp() - 1)
    assert float(chi2(lp, lq)) >= floor
    compare(got[1], floor, "the chi^2 bound", rtol=1e-3)


@exercise("ch02.5", "the batch size at which variance sigma1^2 matches variance sigma2^2 at B = 1")
def _ch02_5(answer):
    compare_function(answer, lambda v1, v2: _matching_batch(v1, v2), [(10.0, 1.0), (7.5, 2.5), (1e3, 0.1)],
                     "your batch size", rtol=1e-6)


# ------------------------------------------------------------------------------------ lab 3, chapter 3


@exercise("lab03.2", "the positions t whose token-IS term is exact when mu and pi differ at position k only")
def _lab03_2(answer, problem, k):
    from rl_lab.exact import Estimator, ExactProblem
    from rl_lab.exact.mismatch import sparse_mismatch

    space, T = problem.space, problem.space.T
    if not 0 <= int(k) < T:
        raise Wrong(f"k must be a position 0..{T - 1} of this space.")
    pr = ExactProblem(space, problem.policy, sparse_mismatch(space, problem.policy().detach(), 5.0, depth=int(k)),
                      problem.reward)
    coef = pr.coefficients(Estimator("token_is"))                                        # (N, T)
    errors = []
    for t in range(T):
        only_t = torch.zeros_like(coef)
        only_t[:, t] = coef[:, t]
        term = pr.expected_gradient(pr.p_mu[:, None] * only_t)
        target = pr.expected_gradient(pr.p_pi[:, None] * pr.reward[:, None] * (torch.arange(T) == t))
        errors.append(float((term - target).norm()))
    scale = float(pr.grad.norm()) + 1e-300
    exact = {t for t, e in enumerate(errors) if e < 1e-10 * scale}
    try:
        got = {int(t) for t in np.atleast_1d(as_array(answer, "the positions"))}
    except (TypeError, ValueError):
        raise Wrong("give the positions as a list of integers, e.g. [0, 2].") from None
    if got - set(range(T)):
        raise Wrong(f"positions run from 0 to {T - 1} (zero-based).")
    if got != exact:
        extra, missing = sorted(got - exact), sorted(exact - got)
        raise Wrong(f"{len(extra)} of your positions are biased, and you left out {len(missing)} exact one(s)."
                    if extra else f"you left out {len(missing)} exact position(s).")


@exercise("ch03.2", "E_mu[rho^2] at T = 200 for chi^2 = 0.01 and for chi^2 = 0.05")
def _ch03_2(answer):
    from rl_lab.exact import chi2

    def second_moment(c, T=200):
        d = math.sqrt(c) / 2                                   # chi^2((1/2 + d, 1/2 - d) || (1/2, 1/2)) = 4 d^2
        lp, lq = torch.log(_t([0.5 + d, 0.5 - d])), torch.log(_t([0.5, 0.5]))
        per_token = float((lq.exp() * (lp - lq).exp() ** 2).sum())      # E_q[(p/q)^2]
        assert math.isclose(per_token - 1, float(chi2(lp, lq)), rel_tol=1e-9)
        return math.exp(T * math.log(per_token))               # T independent tokens
    got = sequence_of(answer, 2, "the answer (chi^2 = 0.01, chi^2 = 0.05)")
    compare(got[0], second_moment(0.01), "the value at chi^2 = 0.01", rtol=0.03)
    compare(got[1], second_moment(0.05), "the value at chi^2 = 0.05", rtol=0.03)


@exercise("ch03.4", "the bound-optimal threshold C* of the chapter's MSE bound, as a function of B and chi^2")
def _ch03_4(answer):
    def c_star(B, chi2_seq):
        return _minimise(lambda C: (1 + chi2_seq) ** 2 / (16 * C ** 2) + C / B, 1e-6, 1e9)
    compare_function(answer, c_star, [(64, 1.0), (1, 0.5), (1024, 10.0), (8, 0.0), (256, 3.0)],
                     "your C*", rtol=1e-5)


# ------------------------------------------------------------------------------------ lab 4, chapter 4


@exercise("lab04.4", "D_KL^seq and delta for the toy, as a function of p")
def _lab04_4(answer):
    from rl_lab.exact import kl

    def toy(p):
        """Two tokens; the second is drawn in context c* (first token 1, probability p under both
        policies) from mu = (1/2, 1/2) and from a pi with KL(mu || pi) = 1, elsewhere alike."""
        half = torch.log(_t([0.5, 0.5]))
        q = _bisect(lambda q: float(kl(half, torch.log(_t([q, 1 - q])))) - 1.0, 1e-12, 0.5, log=True)
        first = torch.log(_t([1 - p, p]))
        second_mu = {0: half, 1: half}
        second_pi = {0: half, 1: torch.log(_t([q, 1 - q]))}
        seq_kl = sum(first[a].exp() * second_mu[a][b].exp() * (second_mu[a][b] - second_pi[a][b])
                     for a in (0, 1) for b in (0, 1))
        delta = max(float(kl(second_mu[a], second_pi[a])) for a in (0, 1))
        return float(seq_kl), delta
    compare_function(answer, toy, [0.5, 0.1, 0.01, 1e-4], "your (D_KL^seq, delta)", rtol=1e-6)


def _reject_share(T, m, s, C):
    """P(|log rho(y)| > log C) for a sum of T log-ratios of mean m and sd s (normal approximation)."""
    phi, sd = NormalDist().cdf, s * math.sqrt(T)
    return phi((-math.log(C) - T * m) / sd) + 1 - phi((math.log(C) - T * m) / sd)


@exercise("ch04.2", "the length beyond which the band rejects more than half, for m = -0.001 and "
          "for m = 0 (s = 0.05, C = 5)")
def _ch04_2(answer):
    got = sequence_of(answer, 2, "the answer (m = -0.001, m = 0)")
    for label, g, m in zip(("m = -0.001", "m = 0"), got, (-0.001, 0.0)):
        half = _bisect(lambda T: _reject_share(T, m, 0.05, 5.0) - 0.5, 1.0, 1e7, log=True)
        compare(g, half, f"the length for {label}", rtol=0.01)


@exercise("ch04.3", "the classical bound at T = 4096 and delta = 1e-4")
def _ch04_3(answer):
    from rl_lab.corrections import trust_region_bounds
    compare(answer, trust_region_bounds(4096, 1e-4)["classical_kl"], "the bound", rtol=1e-3)


@exercise("lab04.5", "TRM-Max and TRM-Avg thresholds that each reject about 30% of the sequences")
def _lab04_5(answer, log_ratio, mask):
    from rl_lab.corrections import rejection_mask

    c_max, c_avg = (float(as_array(x, "a threshold")) for x in sequence_of(answer, 2, "the answer (TRM-Max, TRM-Avg)"))
    for name, option, c in (("TRM-Max", "seq_max_k2", c_max), ("TRM-Avg", "seq_mean_k3", c_avg)):
        if not c > 0:
            raise Wrong(f"the {name} threshold must be positive.")
        _, met = rejection_mask(_t(log_ratio).detach(), torch.as_tensor(mask).bool(), option, c)
        share = met["rollout_rs_seq_masked_fraction"]
        if not 0.2 <= share <= 0.4:
            raise Wrong(f"with your {name} threshold this batch loses {share:.0%} of its sequences; "
                        "aim for about 30%.")


# ------------------------------------------------------------------------------------ lab 5, chapter 5


@exercise("lab05.4", "the band of the per-token mean log-ratio that Geo-RS \"0.999_1.001\" keeps")
def _lab05_4(answer):
    from rl_lab.corrections import rejection_mask

    def kept(x):
        log_ratio = torch.full((1, 4), x, dtype=F64)
        out, _ = rejection_mask(log_ratio, torch.ones(1, 4, dtype=torch.bool), "seq_mean_k1", "0.999_1.001")
        return bool(out.any())
    lo = _bisect(lambda x: 1.0 if kept(x) else -1.0, -0.01, 0.0)
    hi = _bisect(lambda x: 1.0 if kept(x) else -1.0, 0.01, 0.0)
    got = sequence_of(answer, 2, "the band (lowest, highest)")
    compare(got[0], lo, "the lower end", rtol=1e-2)
    compare(got[1], hi, "the upper end", rtol=1e-2)


@exercise("ch05.3", "mu, rho of the two kept tokens, and the limits of chi2_token, kl and k3_kl")
def _ch05_3(answer):
    from rl_lab.exact.mismatch import top_k
    from rl_lab.monitors import mismatch_metrics

    keys = ["mu", "rho", "chi2_token", "kl", "k3_kl"]
    if not isinstance(answer, dict) or set(answer) != set(keys):
        raise Wrong(f"give a dict with the keys {keys}.")
    log_pi = torch.log(_t([0.6, 0.3, 0.1]))
    log_mu = torch.log_softmax(top_k(log_pi[None], 2)[0], -1)
    compare(answer["mu"], log_mu.exp(), "mu", rtol=1e-3, atol=1e-9)
    compare(answer["rho"], (log_pi - log_mu)[:2].exp(), "rho", rtol=1e-3)
    # mu = (2/3, 1/3, 0): a batch of three one-token rows [0, 0, 1] has the limits as its means
    y = torch.tensor([0, 0, 1])
    met = mismatch_metrics(log_pi[y][:, None], log_mu[y][:, None], torch.ones(3, 1, dtype=torch.bool))
    for key in keys[2:]:
        compare(answer[key], met[key], key, rtol=1e-2)


@exercise("ch05.4", "the Geo-RS threshold x that keeps about 80% when the 80th percentile of "
          "|mean log-ratio| is 0.02")
def _ch05_4(answer):
    from rl_lab.toolkits.compare import quantile_threshold

    # eleven one-token sequences whose |log-ratio| has 0.02 exactly at its 80th percentile
    values = _t([0.0, 0.002, -0.004, 0.006, -0.008, 0.01, 0.013, -0.016, 0.02, -0.03, 0.05])[:, None]
    x = quantile_threshold(values, torch.ones_like(values, dtype=torch.bool), "seq_mean_k1", keep=0.8)
    compare(answer, x, "x", rtol=1e-4)


# ------------------------------------------------------------------------------------ lab 6, chapter 6


def _upward_shift(p, eps):
    """Raise the token's logit by eps and lower the other three by eps: the change of its log-prob."""
    z = torch.log(_t([p, (1 - p) / 3, (1 - p) / 3, (1 - p) / 3]))
    moved = z + eps * _t([1.0, -1.0, -1.0, -1.0])
    return float(torch.log_softmax(moved, -1)[0] - torch.log_softmax(z, -1)[0])


@exercise("lab06.1", "the change of log p when the token rises by eps and the rest fall by eps, as a function of (p, eps)")
def _lab06_1(answer):
    compare_function(answer, _upward_shift, [(0.5, 0.1), (1e-4, 0.05), (0.9, 0.5), (0.01, 1.0), (0.3, 0.0)],
                     "your shift", rtol=1e-8, atol=1e-12)


@exercise("ch06.2", "the min_p threshold, the excluded mass, and the largest log-prob gap of a tail token at eps = 0.1")
def _ch06_2(answer):
    from rl_lab.toolkits.pruning import excluded_mass, logprob_shift_bound

    p = torch.cat([_t([0.6]), torch.full((5,), 0.07, dtype=F64), torch.full((500,), 1e-4, dtype=F64)])
    got = sequence_of(answer, 3, "the answer (threshold, excluded mass, largest gap)")
    compare(got[0], 1e-3 * float(p.max()), "the threshold", rtol=1e-3)
    compare(got[1], float(excluded_mass(p.log(), 1e-3)), "the excluded mass", rtol=1e-3)
    compare(got[2], float(logprob_shift_bound(1e-4, 0.1)), "the largest gap", rtol=1e-2)


@exercise("ch06.3", "log pi(a) - log mu~(a) of a kept token, as a function of the excluded mass m")
def _ch06_3(answer):
    from rl_lab.toolkits.pruning import pruned_log_softmax

    def gap(m):
        K = 1000                                               # m spread over K tail tokens
        p = torch.cat([_t([1 - m]), torch.full((K,), m / K, dtype=F64)])
        min_p = 2 * (m / K) / (1 - m)                          # excludes the tail, keeps the mode
        return float(p.log()[0] - pruned_log_softmax(p.log(), min_p)[0])
    compare_function(answer, gap, [0.01, 0.05, 0.2, 0.5], "your gap", rtol=1e-8)


# ------------------------------------------------------------------------------------ lab 7, chapter 7


def _best_quadratic(grad, bias, noise_trace, L):
    from rl_lab.toolkits.lr_mismatch import best_quadratic_step
    return best_quadratic_step(grad, bias, noise_trace, L)


@exercise("lab07.1", "the best step eta* on the quadratic, as a function of (grad, bias, noise_trace, L)")
def _lab07_1(answer):
    g = _t([1.0, -0.5, 0.25])
    cases = [(g, 0.5 * g, 0.1, 2.0), (g, 0.0 * g, 0.5, 1.0), (g, _t([0.5, 1.0, 0.0]), 0.2, 3.0),
             (g, -1.5 * g, 0.1, 1.0), (g, 0.5 * g, 5.0, 0.5)]
    compare_function(answer, _best_quadratic, cases, "your eta*", rtol=1e-9)


def _length_trace(surge_at: int, n: int, baseline: float = 1.0, high: float = 10.0) -> list[float]:
    return [baseline if t < surge_at else high for t in range(n)]


@exercise("lab07.3", "the learning-rate factor at the first step that knows of the surge, with period_factor = 1.0")
def _lab07_3(answer):
    from rl_lab.schedules import length_surge_step, length_triggered_lr_factor

    trace = _length_trace(80, 200)
    t_s = length_surge_step(trace)
    compare(answer, length_triggered_lr_factor(t_s + 1, trace, period_factor=1.0), "the factor", rtol=1e-9)


@exercise("ch07.2", "the steps at which the learning rate changes (up to step 1000), and the factor at step 500")
def _ch07_2(answer):
    from rl_lab.schedules import length_triggered_lr_factor

    trace = _length_trace(110, 1000)
    factors = [length_triggered_lr_factor(t, trace, 50, 3.0, 1.8, 0.1) for t in range(1000)]
    changes = [t for t in range(1, 1000) if factors[t] != factors[t - 1]]
    steps, at_500 = sequence_of(answer, 2, "the answer (the list of steps, the factor at step 500)")
    compare(steps, changes, "the steps", rtol=0, atol=0.5)
    compare(at_500, factors[500], "the factor at step 500", rtol=1e-9)


# ------------------------------------------------------------------------------------ lab 8, chapter 8


@exercise("lab08.1", "the gradient of the loss with respect to the selected router logit when K = 1")
def _lab08_1(answer):
    from rl_lab.toolkits.routing import topk_gate

    g = torch.Generator().manual_seed(0)
    h = torch.randn(200, 8, generator=g, dtype=F64).requires_grad_()
    x, experts = torch.randn(200, 16, generator=g, dtype=F64), torch.randn(8, 16, 16, generator=g, dtype=F64)
    weights, mask = topk_gate(h, 1)
    out = torch.einsum("mn,ndk,mk->md", weights, experts, x)
    (grad,) = torch.autograd.grad((out @ torch.randn(16, generator=g, dtype=F64)).sum(), h)
    selected = float(grad[mask].abs().max())
    compare(float(np.abs(as_array(answer, "the gradient")).max()), selected, "the gradient", rtol=0, atol=1e-12)


@exercise("ch08.2", "the KL between the two one-sided policies at the tie")
def _ch08_2(answer):
    from rl_lab.exact import kl
    from rl_lab.toolkits.routing import mixture_logprobs

    E = 3.0 * torch.eye(3, 4, dtype=F64)
    h0 = _t([1.0, 0.0, 0.0])
    tiny = 1e-9
    with_2 = mixture_logprobs(h0 + tiny * _t([0.0, 1.0, 0.0]), E, k=2)
    with_3 = mixture_logprobs(h0 + tiny * _t([0.0, 0.0, 1.0]), E, k=2)
    compare(answer, float(kl(with_2, with_3)), "the KL", rtol=1e-2)


# ------------------------------------------------------------------------------------ lab 9, chapter 9


@exercise("lab09.1", "E_(y~pi) ||e_y - pi||^2, as a function of pi")
def _lab09_1(answer):
    from rl_lab.exact.baselines import logit_grad_sqnorm

    def by_enumeration(pi):
        V = len(pi)
        z = pi.log()
        return float((pi * logit_grad_sqnorm(z.expand(V, V), torch.arange(V))).sum())
    g = torch.Generator().manual_seed(0)
    cases = [torch.softmax(s * torch.randn(V, generator=g, dtype=F64), -1)
             for V, s in ((2, 1.0), (5, 1.0), (10, 3.0), (50, 0.3))] + [torch.full((4,), 0.25, dtype=F64)]
    compare_function(answer, by_enumeration, cases, "your formula", rtol=1e-9)


@exercise("lab09.3", "OTB's baseline when every member has the same W (equal lengths), as a function of the returns")
def _lab09_3(answer):
    from rl_lab.algos.advantages import optimal_token_baseline

    def baseline(returns):
        n, T = returns.shape
        token_rewards = torch.zeros(n, T, dtype=F64)           # per-token rewards whose returns-to-go are `returns`
        token_rewards[:, :-1] = returns[:, :-1] - returns[:, 1:]
        token_rewards[:, -1] = returns[:, -1]
        mask = torch.ones(n, T, dtype=torch.bool)
        same = torch.full((n, T), math.log(0.3), dtype=F64)
        A, G = optimal_token_baseline(token_rewards, mask, torch.zeros(n, dtype=torch.long), same,
                                      torch.full((n, T), 0.4, dtype=F64))
        return (G - A)[0]                                      # (T,) the same for every member
    g = torch.Generator().manual_seed(1)
    cases = [torch.rand(4, 3, generator=g, dtype=F64), torch.rand(2, 5, generator=g, dtype=F64),
             torch.rand(8, 1, generator=g, dtype=F64)]
    compare_function(answer, baseline, cases, "your baseline", rtol=1e-6, atol=1e-9)


@exercise("ch09.4", "the longest member's advantages at positions 4 and 5, with and without the zero tail")
def _ch09_4(answer):
    from rl_lab.algos.advantages import optimal_token_baseline

    lengths, T = (2, 3, 5), 5
    mask = torch.tensor([[t < n for t in range(T)] for n in lengths])
    token_rewards = torch.zeros(3, T, dtype=F64)
    token_rewards[2, 4] = 1.0                                  # the reward only on the longest, at its end
    old = torch.full((3, T), math.log(0.5), dtype=F64)
    out = {}
    for tail in (True, False):
        A, _ = optimal_token_baseline(token_rewards, mask, torch.zeros(3, dtype=torch.long), old,
                                      torch.full((3, T), 0.5, dtype=F64), handle_zero_tail=tail)
        out[tail] = A[2, 3:5]
    with_tail, without = sequence_of(answer, 2, "the answer (with the zero tail, without it)")
    compare(with_tail, out[True], "the advantages with the zero tail", atol=1e-6)
    compare(without, out[False], "the advantages without the zero tail", atol=1e-6)


# ------------------------------------------------------------------------------------ lab 10, chapter 10


def _group_bits(G: int, p: float) -> float:
    """H(R_1..R_G) in bits for G independent 0/1 rewards of success probability p (enumerated)."""
    from rl_lab.toolkits.information import entropy_bits

    outcomes = np.array(list(itertools.product((0, 1), repeat=G)))
    return entropy_bits(np.prod(np.where(outcomes == 1, p, 1 - p), axis=1))


@exercise("lab10.1", "the bits a group of G binary rewards can carry at most, as a function of (G, p)")
def _lab10_1(answer):
    compare_function(answer, _group_bits, [(8, 0.5), (8, 0.9), (4, 0.3), (1, 0.5), (6, 0.99)],
                     "your ceiling", rtol=1e-6)


@exercise("lab10.2", "the most bits one score on a 5-point scale can carry")
def _lab10_2(answer):
    from rl_lab.toolkits.information import entropy_bits
    compare(answer, entropy_bits(np.full(5, 0.2)), "the bits", rtol=1e-3)


def _rank1_llama_bits() -> float:
    from rl_lab.toolkits.information import capacity_table

    table = capacity_table(models=("Llama-3.1-8B",), ranks=(1,))
    return float(table.set_index("adapter").loc["LoRA r=1", "capacity (bits)"])


@exercise("lab10.3", "the number of episodes at which 1 bit per episode equals rank-1 LoRA's capacity on Llama-3.1-8B")
def _lab10_3(answer):
    compare(answer, _rank1_llama_bits(), "the number of episodes", rtol=0.02)


@exercise("ch10.1", "the most a group of 8 can teach at p = 0.5 and at p = 0.9 (bits), and the "
          "probability at p = 0.9 that the update is zero")
def _ch10_1(answer):
    got = sequence_of(answer, 3, "the answer (bits at 0.5, bits at 0.9, probability)")
    compare(got[0], _group_bits(8, 0.5), "the bits at p = 0.5", rtol=1e-3)
    compare(got[1], _group_bits(8, 0.9), "the bits at p = 0.9", rtol=1e-2)
    compare(got[2], _zero_spread_probability(0.9, 8), "the probability", rtol=1e-2)


@exercise("ch10.3", "H(sum of T = 1000 uniform ternary rewards), in bits")
def _ch10_3(answer):
    from rl_lab.toolkits.information import scalar_advantage_bits
    compare(answer, scalar_advantage_bits(np.full(3, 1 / 3), 1000)["exact"], "the entropy", rtol=5e-3)


@exercise("ch10.4", "the episodes at which the signal reaches rank-1 LoRA's capacity on Llama-3.1-8B, "
          "and that capacity in bits on the labs' 0.3M model")
def _ch10_4(answer):
    from transformers import AutoConfig

    from rl_lab.models import warm_start_path
    from rl_lab.toolkits.lora import lora_parameter_count

    small = 2.0 * lora_parameter_count(AutoConfig.from_pretrained(warm_start_path("addition")), 1)
    got = sequence_of(answer, 2, "the answer (episodes for Llama-3.1-8B, bits of the 0.3M model)")
    compare(got[0], _rank1_llama_bits(), "the episodes for Llama-3.1-8B", rtol=0.02)
    compare(got[1], small, "the bits of the 0.3M model", rtol=1e-3)


@exercise("ch10.6", "the surprisal of one success at a 1% pass rate, and the bits of an average episode")
def _ch10_6(answer):
    from rl_lab.toolkits.information import binary_entropy_bits
    got = sequence_of(answer, 2, "the answer (surprisal of a success, average bits)")
    compare(got[0], -math.log2(0.01), "the surprisal", rtol=1e-3)
    compare(got[1], float(binary_entropy_bits(0.01)), "the average", rtol=1e-2)


# ------------------------------------------------------------------------------------ lab 11, chapter 11


@exercise("ch11.5", "d ln T for d = 10, T = 500, and the Marchenko-Pastur edges for M = 4d")
def _ch11_5(answer):
    d, T, M = 10, 500, 40
    got = sequence_of(answer, 3, "the answer (d ln T, lower edge, upper edge)")
    compare(got[0], d * math.log(T), "d ln T", rtol=5e-3)
    compare(got[1], (1 - math.sqrt(d / M)) ** 2, "the lower edge", rtol=1e-3)
    compare(got[2], (1 + math.sqrt(d / M)) ** 2, "the upper edge", rtol=1e-3)


# ------------------------------------------------------------------------------------ lab 12, chapter 12


@exercise("lab12.1", "the kind that reading /etc/hostname comes back as")
def _lab12_1(answer):
    from rl_lab.agents.python_tool import SandboxLimits, run_python, sandbox_mode

    if not isinstance(answer, str):
        raise Wrong("give the kind as a string, such as \"error\".")
    limits = SandboxLimits(timeout_s=5.0, allow_unsandboxed=sandbox_mode().name != "namespaces")
    kind = run_python("print(open('/etc/hostname').read())", limits).kind
    if answer.strip().strip("'\"") != kind:
        raise Wrong(f"the case does not come back as {answer!r} here: run it with run_python and read "
                    "the result's .kind.")


@exercise("ch12.2", "the angle (degrees) of the self-included estimator at G = 4 once theta1[0] = -5")
def _ch12_2(answer):
    from rl_lab.algos.trloo import turn_self_included
    from rl_lab.exact.turns import TwoTurnToy, angle_degrees, expected_update, true_gradient

    toy = TwoTurnToy(n1=3, n2=3, stops=(0,), seed=0)
    with torch.no_grad():
        toy.theta1[0] = -5
    angle = angle_degrees(expected_update(toy, 4, turn_self_included), true_gradient(toy))
    compare(answer, angle, "the angle", rtol=0.05, atol=1e-3)


@exercise("ch12.3", "the gradient of PPO's clipped loss with A = +1 and r = 100")
def _ch12_3(answer):
    from rl_lab.algos.losses import policy_loss

    logp = torch.full((1, 1), math.log(1e-2), dtype=F64, requires_grad=True)
    old = torch.full((1, 1), math.log(1e-4), dtype=F64)
    per_token, _ = policy_loss(logp, old, _t([1.0]), torch.ones(1, 1, dtype=torch.bool), clip_ratio_c=3.0)
    (grad,) = torch.autograd.grad(per_token.sum(), logp)
    compare(float(np.abs(as_array(answer, "the gradient")).max()), float(grad.abs().max()), "the gradient",
            rtol=0, atol=1e-12)


@exercise("ch12.4", "the seeds a side for delta = 0.028 and sigma = 0.02, without and with Holm for eight comparisons")
def _ch12_4(answer):
    z = NormalDist().inv_cdf
    sigma, delta = 0.02, 0.028
    n = 2 * (z(0.975) + z(0.8)) ** 2 * sigma ** 2 / delta ** 2
    n_holm = 2 * (z(1 - 0.05 / 16) + z(0.8)) ** 2 * sigma ** 2 / delta ** 2
    got = sequence_of(answer, 2, "the answer (seeds, seeds with Holm)")
    compare(got[0], n, "the seeds without Holm", rtol=0.1)
    compare(got[1], n_holm, "the seeds with Holm", rtol=0.1)


# ------------------------------------------------------------- "Break it, then fix it", chapter "Where the mismatch comes from"


def _source_config(mismatch: dict):
    from rl_lab.presets import get_preset
    return get_preset("smoke", task="addition", model="warm-start", mismatch=mismatch)


@exercise("lab_break_it_fix_it.1", "k3 with the batch-variant dial at parallel_rows = 1")
def _break_1(answer):
    from rl_lab.toolkits.mismatch_sources import measure

    (step,) = measure(_source_config({"batch_variant": {"parallel_rows": 1}}), steps=1)
    got = float(as_array(answer, "k3"))
    if got != step["k3"]:
        raise Wrong("k3 is not that here: " + ("it is not just small." if abs(got) < 1e-6 else
                                               "run the measurement and read its k3."))


@exercise("lab_break_it_fix_it.4", "whether sync_check passes on a skipped layer at step 0 (True or False)")
def _break_4(answer):
    from rl_lab.toolkits.mismatch_sources import sync_check

    if not isinstance(answer, (bool, np.bool_)):
        raise Wrong("answer True (it passes) or False (it fails).")
    if bool(answer) != bool(sync_check(_source_config({"weight_sync": {"fault": "skip_layer"}}))["passed"]):
        raise Wrong("that is not what sync_check says: run it and read its 'passed'.")


@exercise("ch_mismatch_sources.1", "rho_t of a kept token, as a function of pi and the kept set S")
def _sources_1(answer):
    def kept_ratio(pi, kept):
        mu = torch.zeros_like(pi)
        mu[kept] = pi[kept] / pi[kept].sum()                  # the sampler renormalises over S
        a = kept[0]
        return float(pi[a] / mu[a])
    g = torch.Generator().manual_seed(2)
    cases = []
    for V, k in ((3, 2), (10, 4), (50, 1), (6, 6)):
        pi = torch.softmax(torch.randn(V, generator=g, dtype=F64), -1)
        cases.append((pi, torch.randperm(V, generator=g)[:k].sort().values))
    compare_function(answer, kept_ratio, cases, "your rho_t", rtol=1e-9)


# ------------------------------------------------------------- "When speed kills stability"


@exercise("lab_when_speed_kills.1", "the bound on the logit-gradient norm, and a (pi, a) within 1% of it")
def _speed_1(answer):
    from rl_lab.monitors import logit_gradient_norm

    def norm(pi, a):
        return float(logit_gradient_norm(pi.log()[None, None], torch.tensor([[a]]))[0, 0])
    bound, pi, a = sequence_of(answer, 3, "the answer (bound, pi, a)")
    eps = 1e-12
    sup = norm(_t([1 - eps, eps]), 1)                          # a rare token, all other mass on one token
    compare(bound, sup, "the bound", rtol=1e-6)
    pi = as_array(pi, "pi")
    if pi.ndim != 1 or len(pi) < 2 or (pi < 0).any() or not math.isclose(pi.sum(), 1.0, abs_tol=1e-9):
        raise Wrong("pi should be a probability vector (non-negative, summing to 1).")
    if not isinstance(a, (int, np.integer)) or not 0 <= a < len(pi):
        raise Wrong(f"a should be a token index 0..{len(pi) - 1}.")
    pi_t = _t(pi).clamp(min=1e-300)
    if norm(pi_t, int(a)) < 0.99 * sup:
        raise Wrong("that (pi, a) is not within 1% of the bound: which token, and where must the rest of "
                    "the mass sit?")


@exercise("ch_when_speed_kills.1", "a two-token (pi, mu) with E_mu[log pi - log mu] < 0 and a positive "
          "log-ratio on the less likely token")
def _speed_ch_1(answer):
    pi, mu = (as_array(x, "a distribution") for x in sequence_of(answer, 2, "the answer (pi, mu)"))
    for name, p in (("pi", pi), ("mu", mu)):
        if p.shape != (2,) or (p <= 0).any() or not math.isclose(p.sum(), 1.0, abs_tol=1e-9):
            raise Wrong(f"{name} should be two positive probabilities summing to 1.")
    mean = float((mu * (np.log(pi) - np.log(mu))).sum())
    if not mean < 0:
        raise Wrong("the two distributions are equal: the mean log-ratio is 0, not negative.")
    rare = int(np.argmin(mu))
    if mu[0] == mu[1]:
        raise Wrong("under mu both tokens are equally likely: make one of them the less likely one.")
    if not np.log(pi[rare]) - np.log(mu[rare]) > 0:
        raise Wrong("the log-ratio on the token mu finds less likely is not positive here.")


@exercise("ch_when_speed_kills.4", "is each series a collapse under the default rule? (first, second)")
def _speed_ch_4(answer):
    from rl_lab.toolkits.collapse import detect_collapse

    rise = list(np.linspace(0.0, 0.6, 50)) + [0.6] * 50
    first = rise + [0.25] * 30 + [0.55] * 100
    second = rise + [0.25] * 30 + [0.4] * 100
    want = [detect_collapse(first)["collapsed"], detect_collapse(second)["collapsed"]]
    got = sequence_of(answer, 2, "the answer (first series, second series)")
    for label, g, w in zip(("first", "second"), got, want):
        if not isinstance(g, (bool, np.bool_)):
            raise Wrong(f"answer True or False for the {label} series.")
        if bool(g) != bool(w):
            raise Wrong(f"the {label} series: not what the rule says.")


@exercise("lab_measure_your_mismatch.2", "chi^2 of the sequence from the per-token chi^2 of independent tokens")
def _measure_2(answer):
    from rl_lab.exact import chi2

    def by_enumeration(chi2_tokens):
        lp_seq, lq_seq = torch.zeros(1, dtype=F64), torch.zeros(1, dtype=F64)
        for c in chi2_tokens:
            d = math.sqrt(float(c)) / 2
            lp, lq = torch.log(_t([0.5 + d, 0.5 - d])), torch.log(_t([0.5, 0.5]))
            lp_seq = (lp_seq[:, None] + lp[None]).reshape(-1)                   # every sequence so far
            lq_seq = (lq_seq[:, None] + lq[None]).reshape(-1)
        return float(chi2(lp_seq, lq_seq))
    cases = [([0.01] * 5,), ([0.1, 0.2, 0.05],), ([0.5] * 8,), ([0.0, 0.3],)]
    compare_function(answer, by_enumeration, cases, "your chi2_seq", rtol=1e-9)
