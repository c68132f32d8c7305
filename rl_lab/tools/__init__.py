"""The package's tools: what a person runs, or reads results with; built on the core and never
imported by it (tests/repo/test_import_graph.py).

  cli        `rl-lab` (train, plot, sweep, warmstart, doctor, export, import-metrics, diagnose)
  warmstart  builds and checks the shipped supervised warm starts (`python -m rl_lab.tools.warmstart`)
  sweep      a YAML grid of configs x seeds, resumable, with parallel workers (`rl-lab sweep`)
  doctor     is this machine ready for the labs? (`rl-lab doctor`)
  diagnose   did a run (rl_lab's or verl's) collapse, why, and what to try (`rl-lab diagnose`)
  plots      the labs' figures and their sliders (`explorer`)
  stats      Welch's t, Holm, Fisher, Wilson: is a difference real?
  kernel     the labs' Jupyter kernel, which sets the thread policy first (`python -m rl_lab.tools.kernel`)
"""
