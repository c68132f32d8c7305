"""Sphinx extensions for the book, named in _config.yml (`sphinx: extra_extensions:`).  They import
Sphinx, which is not a runtime dependency, and nothing in rl_lab imports them
(tests/repo/test_import_graph.py).

  repository  the repository URL and the launch buttons that need it
  solutions   exercise solutions as closed dropdowns, or left out (RL_LAB_SOLUTIONS=0)
  decisions   the decision table (which correction when) from book/data/decisions.yaml
"""
