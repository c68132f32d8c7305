"""Exploration with ensembles (chapter 11): bandit environments, Thompson sampling, ensemble
sampling, Ensemble++ (linear and neural) and greedy agents, all batched over seeds, with the
runner and diagnostics the lab uses."""
from rl_lab.toolkits.bandits.envs import (
    ENVIRONMENTS,
    Bandit,
    FiniteBandit,
    LinearBandit,
    NeuralBandit,
    QuadraticBandit,
    UnitBallBandit,
)
from rl_lab.toolkits.bandits.linear import (
    INDICES,
    PERTURBATIONS,
    EnsemblePlusPlus,
    EnsembleSampling,
    Greedy,
    LinearAgent,
    ThompsonSampling,
    posterior_step,
    regress_step,
    unit_noise,
)
from rl_lab.toolkits.bandits.run import (
    BANDIT_PRESETS,
    BanditRun,
    bandit_preset,
    bootstrap_ratios,
    covariance_spectrum,
    ensemble_size_grid,
    matches_ts,
    plot_regret,
    regret_quantiles,
    regret_table,
    run_bandit,
    smallest_matching_M,
)

__all__ = [
    "Bandit", "FiniteBandit", "LinearBandit", "NeuralBandit", "QuadraticBandit", "UnitBallBandit",
    "ENVIRONMENTS", "INDICES", "PERTURBATIONS", "EnsemblePlusPlus", "EnsembleSampling", "Greedy",
    "LinearAgent", "ThompsonSampling", "posterior_step", "regress_step", "unit_noise",
    "BANDIT_PRESETS", "BanditRun", "bandit_preset", "covariance_spectrum", "plot_regret",
    "regret_table", "run_bandit", "bootstrap_ratios", "ensemble_size_grid", "matches_ts", "regret_quantiles", "smallest_matching_M",
]
