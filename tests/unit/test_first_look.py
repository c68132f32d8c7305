"""rl_lab.toolkits.first_look: the intro's figure (one set of weights, two engines) and the reading
time of the 45-minute path (issue 52)."""
import math

import pytest
import torch

from rl_lab.toolkits import first_look


def test_reading_words_reads_what_a_reader_reads():
    page = ("---\nkernelspec: {}\n---\n# Title\n\nOne two.\n\n"
            "```{code-cell} ipython3\n:tags: [remove-cell]\nhidden hidden\n```\n\n"
            "```{code-cell} ipython3\nshown = 3\n```\n\n"
            "```{admonition} Folded\n:class: dropdown\nfolded words\n```\n\n"
            "```{admonition} Key idea\n:class: tip\nkept\n```\n\n"
            "$$\n\\rho = \\pi / \\mu\n$$\n\n## A\n\nalpha\n\n## B\n\nbeta gamma\n\n## Exercises\n\nnot read\n")
    words = first_look.reading_words(page)
    # Title One two | shown 3 | Key idea kept | rho pi mu | A alpha | B beta gamma
    assert words == 3 + 2 + 3 + 3 + 2 + 3
    assert first_look.reading_words(page, sections=[]) == 3 + 2 + 3 + 3
    assert first_look.reading_words(page, sections=["B"]) == 3 + 2 + 3 + 3 + 3
    with pytest.raises(KeyError):
        first_look.reading_words(page, sections=["C"])


def test_two_engines_both_differ_from_the_trainer_the_stale_one_by_far_more():
    torch.set_num_threads(1)
    result = first_look.two_engines(staleness=2, n_prompts=16)
    gap = result.batch["mean_abs_gap"]
    assert 0 < gap["precision"] < gap["stale"] / 10, gap
    assert len(result.train_rewards) == 2 and all(math.isfinite(r) for r in result.train_rewards)
    for t in result.tokens.values():
        assert len(t) >= 1
        assert ((t["log_mu"] <= 0) & (t["log_pi"] <= 0)).all()
        assert (t["gap"] - (t["log_pi"] - t["log_mu"])).abs().max() == 0
