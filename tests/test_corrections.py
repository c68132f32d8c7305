import torch

from rl_lab.corrections import rollout_correction, truncated_is_weights
from rl_lab.monitors import mismatch_metrics


def test_token_and_sequence_tis_by_hand():
    lr = torch.log(torch.tensor([[2.0, 0.5, 4.0], [1.5, 1.0, 1.0]]))
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    w, _ = truncated_is_weights(lr, m, "token", 3.0)
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 3.0], [1.5, 1.0, 0.0]]))
    w, info = truncated_is_weights(lr, m, "sequence", 3.0)
    assert torch.allclose(w, torch.tensor([[3.0, 3.0, 3.0], [1.5, 1.5, 0.0]]))  # 2*0.5*4 = 4 -> 3
    assert abs(info["rollout_is_ratio_fraction_high"] - 0.6) < 1e-6


def test_weights_are_detached_and_mask_is_unchanged():
    logp = torch.zeros(2, 3, requires_grad=True)
    mu = torch.full((2, 3), -0.1)
    m = torch.ones(2, 3, dtype=torch.bool)
    w, m2, metrics = rollout_correction(logp, mu, m, rollout_is="token")
    assert not w.requires_grad and torch.equal(m2, m)
    assert set(k.split("/")[0] for k in metrics) == {"rollout_corr"}


def test_monitors_are_zero_on_policy_and_positive_off_policy():
    lp = torch.log_softmax(torch.randn(4, 6), -1)
    m = torch.ones(4, 6)
    on = mismatch_metrics(lp, lp, m)
    assert on["k3_kl"] == 0 and on["log_ppl_diff"] == 0 and abs(on["chi2_token"]) < 1e-12
    off = mismatch_metrics(lp, lp + 0.1 * torch.randn(4, 6), m)
    assert off["k3_kl"] > 0 and off["log_ppl_abs_diff"] > 0 and off["max_abs_logprob_diff"] > 0
    # k1 per-token: mean(log mu - log pi) over the mask
    mu = lp - 0.2
    assert abs(mismatch_metrics(lp, mu, m)["kl"] + 0.2) < 1e-6
