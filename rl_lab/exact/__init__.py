"""rl_lab.exact: exact ground truth for off-policy policy gradients on enumerable sequence spaces."""
from rl_lab.exact.analysis import (
    bound_optimal_threshold,
    estimator_table,
    expected_ascent,
    loglog_slope,
    mc_errors,
    seq_tis_mse_bound,
    threshold_sweep,
)
from rl_lab.exact.baselines import (
    BASELINES,
    baseline_values,
    estimator_variance,
    group_estimator_mse,
    logit_grad_sqnorm,
    per_token_proxy,
    per_token_scores,
    variance_table,
)
from rl_lab.exact.bounds import estimator_bounds, score_sups, simulation_lemma
from rl_lab.exact.estimators import (
    COMBINED,
    ESTIMATORS,
    LABELS,
    Estimator,
    ExactProblem,
    Moments,
    estimator_weights,
    exact_moments,
    geo_gate,
    monte_carlo,
    standard_estimators,
)
from rl_lab.exact.mismatch import MECHANISMS, behaviour_logits
from rl_lab.exact.policies import (
    NetworkPolicy,
    TabularPolicy,
    feedback_policy,
    flat_grad,
    flat_params,
    log_probs,
    logits_at,
    score_sqnorm,
    score_table,
    set_flat_params,
)
from rl_lab.exact.quantities import (
    REWARDS,
    Divergences,
    chi2,
    divergences,
    exact_gradient,
    kl,
    make_reward,
    objective,
    sequence_probs,
    tv,
)
from rl_lab.exact.sga import (
    best_step,
    expected_progress,
    objective_at,
    per_sequence_estimates,
    sga_efficiency,
    sga_terms,
    smoothness,
)
from rl_lab.exact.space import SequenceSpace
from rl_lab.exact.trust_region import error_identity, surrogate_error, trm_bound_table, trm_divergences
