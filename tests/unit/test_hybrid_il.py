"""Hybrid RL/IL (rl_lab.algos.hybrid): the note's dense KL gradient pi_j (log pi_j - log q_j - KL)
against autograd and finite differences, the imitation loss, and the trainer's imitation /
teacher_kl terms (validated; a teacher equal to the policy adds a zero KL and no gradient)."""
import copy

import pytest
import torch
import torch.nn.functional as F

from rl_lab import RLConfig, Trainer
from rl_lab.algos.hybrid import imitation_nll, kl_logit_gradient, reverse_kl
from rl_lab.config import ConfigError
from rl_lab.models import build_model


def distinct_characters(completions, **kw):
    """A reward with spread, so the RL gradient is not zero."""
    return [float(len(set(c))) for c in completions]


SMALL = dict(model="0.3M", prompts_per_step=2, num_generations=2, max_completion_length=6,
             progress_bar=False, learning_rate=1e-3, max_steps=1, seed=0)


def test_the_dense_kl_gradient_matches_autograd_and_finite_differences():
    g = torch.Generator().manual_seed(0)
    z = (2 * torch.randn(3, 4, 9, generator=g, dtype=torch.float64)).requires_grad_()
    log_q = F.log_softmax(2 * torch.randn(3, 4, 9, generator=g, dtype=torch.float64), -1)
    kl = reverse_kl(F.log_softmax(z, -1), log_q)                                       # (3, 4)
    autograd = torch.autograd.grad(kl.sum(), z)[0]
    closed = kl_logit_gradient(z.detach(), log_q)
    assert (closed - autograd).abs().max() < 1e-12
    assert closed.sum(-1).abs().max() < 1e-12                                         # logits' shift invariance
    h, e = 1e-6, torch.zeros_like(z)
    e[1, 2, 5] = h
    fd = (reverse_kl(F.log_softmax(z.detach() + e, -1), log_q) - reverse_kl(F.log_softmax(z.detach() - e, -1), log_q))
    assert abs(fd[1, 2].item() / (2 * h) - closed[1, 2, 5].item()) < 1e-8
    same = kl_logit_gradient(log_q.clone(), log_q)                                    # pi = q: no pull
    assert same.abs().max() < 1e-12 and reverse_kl(log_q, log_q).abs().max() < 1e-12


def test_reverse_kl_ignores_tokens_the_policy_cannot_draw():
    logp = torch.tensor([[0.0, float("-inf")]])                                        # pi = (1, 0)
    log_q = torch.tensor([[0.5, 0.5]]).log()
    assert reverse_kl(logp, log_q).item() == pytest.approx(torch.log(torch.tensor(2.0)).item())


def test_imitation_nll_counts_labelled_tokens_only():
    logits = torch.zeros(1, 4, 5)
    logits[0, 1, 3] = 10.0                                                             # predicts label at 2
    labels = torch.tensor([[-100, -100, 3, -100]])
    assert imitation_nll(logits, labels).item() == pytest.approx(-F.log_softmax(logits[0, 1], -1)[3].item())
    with pytest.raises(ValueError, match="no demonstration token"):
        imitation_nll(logits, torch.full((1, 4), -100))


def test_hybrid_options_are_validated():
    with pytest.raises(ConfigError, match="TeacherKLConfig.model is not set"):
        RLConfig(teacher_kl={"coef": 0.1})
    with pytest.raises(ConfigError, match="ImitationConfig.coef"):
        RLConfig(imitation={"coef": -1.0})
    assert RLConfig(teacher_kl={"model": "warm-start"}).teacher_kl.coef == 0.1


def one_step(model, tok, **cfg):
    """One trainer step from a copy of `model`'s weights, with a reward that has spread."""
    return Trainer(RLConfig(**SMALL, **cfg), model=copy.deepcopy(model), tokenizer=tok,
                   reward_funcs=[distinct_characters]).step()


def test_the_trainer_adds_imitation_and_teacher_kl_terms(tmp_path):
    model, tok = build_model("0.3M", seed=0)
    plain, il = one_step(model, tok), one_step(model, tok, imitation={"coef": 1.0})
    assert plain["grad_norm"] > 0 and "il/nll" not in plain and "teacher_kl" not in plain
    assert il["il/nll"] > 0 and il["loss"] != plain["loss"] and il["grad_norm"] != plain["grad_norm"]
    # a teacher identical to the policy: KL 0, so the same gradient as without it
    for name, seed in (("same", 0), ("other", 1)):
        build_model("0.3M", seed=seed)[0].save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    same = one_step(model, tok, teacher_kl={"coef": 1.0, "model": str(tmp_path / "same")})
    assert same["teacher_kl"] == pytest.approx(0.0, abs=1e-6)
    assert same["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-4)
    pulled = one_step(model, tok, teacher_kl={"coef": 1.0, "model": str(tmp_path / "other")})
    assert pulled["teacher_kl"] > 0.01 and pulled["grad_norm"] != pytest.approx(plain["grad_norm"], rel=1e-3)


@pytest.fixture
def probe():
    from rl_lab.method_specs import MethodSpec, register_method, unregister_method
    register_method(MethodSpec("probe", "helpers:StepProbe"))
    yield
    unregister_method("probe")


def test_teacher_kl_alone_descends_the_kl_with_the_closed_form_gradient_on_model_tokens_only(tmp_path, probe):
    """On a fixed multi-turn batch with zero reward (no policy gradient), the teacher term is the
    whole loss: beta x token-mean of KL(pi || q).  (a) The trainer's gradient with respect to the
    logits equals beta x kl_logit_gradient / (counted tokens) on the model's tokens and is 0 on the
    environment's; (b) one optimizer step lowers the KL to the teacher on that batch.  A flipped
    sign fails (b), the forward KL(q || pi) or a term on the tool's tokens fails (a)."""
    from helpers import FixedEngine, scripted_batch

    batch, tok = scripted_batch()
    assert batch.env_mask.any()
    build_model("0.3M", seed=1)[0].save_pretrained(tmp_path / "teacher")
    tok.save_pretrained(tmp_path / "teacher")
    model, _ = build_model("0.3M", seed=0)
    beta = 0.5
    cfg = RLConfig(**{**SMALL, "max_completion_length": 40, "max_steps": 2, "learning_rate": 1e-3},
                   teacher_kl={"coef": beta, "model": str(tmp_path / "teacher")}, extra_methods={"probe": True})
    trainer = Trainer(cfg, model=model, tokenizer=tok, engine=FixedEngine(model, tok, batch),
                      reward_funcs=[lambda completions, **kw: [0.0] * len(completions)])
    first = trainer.step()
    assert first["frac_reward_zero_std"] == 1 and first["grad_norm"] > 0
    logp_all, grad_logp = first["probe/logp_all"], first["probe/logp_all_grad"]        # (B, T, V)
    pi = logp_all.exp()
    grad_z = grad_logp - pi * grad_logp.sum(-1, keepdim=True)      # d loss / d z from d loss / d log pi
    teacher = trainer.methods[[m.name for m in trainer.methods].index("teacher_kl")].teacher
    with torch.no_grad():
        from rl_lab.algos.losses import token_logprobs
        log_q = token_logprobs(teacher, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, 1.0,
                               with_all=True).logp_all
    mask = first["probe/loss_mask"]
    assert torch.equal(mask, batch.completion_mask.bool())
    expected = beta * kl_logit_gradient(logp_all, log_q) * mask[..., None] / mask.sum()
    assert torch.allclose(grad_z, expected, atol=1e-7, rtol=1e-4)
    assert grad_z[batch.env_mask].abs().max() == 0                  # the tool's tokens get no gradient
    assert grad_z[mask].abs().max() > 1e-5
    second = trainer.step()                                          # the same batch, after one step
    assert second["teacher_kl"] < first["teacher_kl"]


def test_the_dense_split_is_lower_against_the_usual_estimator_but_not_against_every_comparator():
    """rl_lab.exact.hybrid on 40 enumerated students: every estimator is unbiased; the dense + sparse
    estimator has the lower variance than REINFORCE on the KL-regularised reward on 39 of 40, and
    than the variant that keeps the mean-zero -beta grad log pi term on 22 of 40 (chapter 12's
    numbers; a change in any estimator moves them)."""
    from rl_lab.exact.hybrid import hybrid_estimators, variance_counts
    counts = variance_counts(40)
    assert (counts["usual Monte Carlo"], counts["Monte Carlo + score"]) == (39, 22)
    out, grad_J = hybrid_estimators(3, beta=0.0)
    variances = [v for _, v in out.values()]
    assert max(variances) - min(variances) < 1e-12
