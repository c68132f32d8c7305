"""Bridges from rl_lab to other RL stacks: `rl_lab.integrations.verl` exports an `RLConfig` to verl's
`ppo_trainer` (overrides, data, reward, model) and reads a verl run's metrics back (chapter 13).
Nothing in the core imports this package."""
