"""Chapter toolkits: each module serves one chapter and its lab, on top of the core.

  first_look    the intro and "The book in 45 minutes": one set of weights, two engines; the path's minutes
  collapse      When speed kills stability: the collapse criterion, lead times
  compare       chapter 5 (and labs 4, 6, 7, 9): methods x seeds on one batch or one grid of runs
  pruning       chapter 6: dynamic vocabulary pruning
  lr_mismatch   chapter 7: learning-rate schedules against the mismatch
  routing       chapter 8: Top-K routing in mixture-of-experts layers
  information   chapter 10: information bandwidth, and the LoRA rank sweep's training runs
  lora          chapter 10: LoRA adapters (apply, count, merge, first-step KL)
  bandits/      chapter 11: exploration with ensembles

Import them by name (`from rl_lab.toolkits import compare`); nothing here is loaded by `import rl_lab`.
"""
