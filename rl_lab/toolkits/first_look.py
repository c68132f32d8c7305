"""The intro and "The book in 45 minutes": one set of weights feeding two engines.

`two_engines()` takes the shipped addition warm start, trains it for `staleness` GRPO steps, and
then lets two samplers write completions for the same prompts:

  (a) "precision": a bfloat16 copy of the *current* weights (`sampler_dtype="bfloat16"`);
  (b) "stale":     the weights `staleness` optimizer steps old (`sampler_staleness=k`, the
                   asynchronous-RL injector of rl_lab.engines.injectors, synced once per step as
                   the trainer syncs it).

The fp32 trainer then scores every sampled token, so each token has the sampler's log mu and the
trainer's log pi.  `figure()` draws one completion per sampler; the batch statistics say how large
the gap is over all of them.  Runs in a few seconds on one CPU thread.

`reading_words()` counts what a reader reads on a page (for the 45-minute page's time budget).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

READING_WPM = 120
"""Words per minute for a technical text with equations (issue 52's reading rate)."""

SAMPLERS = {"precision": "(a) bf16 sampler, current weights", "stale": "(b) fp32 sampler, weights {k} steps old"}


@dataclass
class TwoEngines:
    prompt: str
    """The prompt of the completions drawn in the figure (the first of the batch)."""
    tokens: dict[str, pd.DataFrame]
    """Per sampler: one completion, one row per sampled token (token, log_mu, log_pi, gap)."""
    batch: pd.DataFrame
    """Per sampler: tokens, mean |log pi - log mu| and mean k3 over every sampled token of the batch."""
    staleness: int
    train_rewards: list[float]


def _token_text(tok, i: int) -> str:
    if i == tok.eos_token_id:
        return "<eos>"
    return tok.decode([i])


def two_engines(staleness: int = 4, learning_rate: float = 5e-4, seed: int = 0, n_prompts: int = 64,
                task: str = "addition") -> TwoEngines:
    """Train `staleness` steps, then sample one completion per prompt with each sampler and score the
    tokens with the trainer (fp32).  The defaults are the stability map's collapsing cell (stale 4,
    lr 5e-4, seed 0; chapter "When speed kills stability").  Runs on the CPU."""
    from rl_lab import RLConfig, Trainer, get_task
    from rl_lab.algos.losses import token_logprobs
    from rl_lab.engines import make_engine

    # on the CPU everywhere, so that every reader's figure is the same one (bf16 rounds alike)
    cfg = RLConfig(task=task, model="warm-start", max_steps=staleness, learning_rate=learning_rate,
                   seed=seed, progress_bar=False, eval_steps=0, device="cpu")
    trainer = Trainer(cfg)
    model, tok = trainer.model, trainer.tokenizer
    stale = make_engine(cfg.replace(sampler_staleness=staleness), model, tok)      # a MismatchEngine
    rewards = []
    for _ in range(staleness):
        stale.sync_weights(model)             # what the sampler is given before each step ...
        rewards.append(float(trainer.step()["reward"]))
    stale.sync_weights(model)                 # ... and now: it loads the weights `staleness` steps old
    engines = {"precision": make_engine(cfg.replace(sampler_dtype="bfloat16"), model, tok), "stale": stale}
    engines["precision"].sync_weights(model)

    examples = get_task(task).make_dataset(n_prompts, seed=1)
    prompts = [ex["prompt"] for ex in examples]
    sampling = cfg.sampling()
    tokens, stats = {}, []
    model.eval()
    for name, engine in engines.items():
        batch = engine.generate(prompts, 1, sampling, torch.Generator().manual_seed(seed))
        with torch.no_grad():
            log_pi = token_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids).logp
        mask = batch.completion_mask.bool()
        gap = (log_pi - batch.sampler_logprobs)[mask]
        stats.append({"sampler": name, "tokens": int(mask.sum()), "mean_abs_gap": gap.abs().mean().item(),
                      "max_abs_gap": gap.abs().max().item(), "k3": (gap.exp() - 1 - gap).mean().item()})
        row = mask[0]
        ids = batch.completion_ids[0][row].tolist()
        tokens[name] = pd.DataFrame({"token": [_token_text(tok, i) for i in ids],
                                     "log_mu": batch.sampler_logprobs[0][row].numpy(),
                                     "log_pi": log_pi[0][row].numpy()})
        tokens[name]["gap"] = tokens[name]["log_pi"] - tokens[name]["log_mu"]
    model.train()
    return TwoEngines(prompts[0], tokens, pd.DataFrame(stats).set_index("sampler"), staleness, rewards)


def figure(result: TwoEngines):
    """Two panels, one per sampler: log mu and log pi of each token of one completion, the gap
    log pi - log mu written above each pair."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    low = min(min(t["log_mu"].min(), t["log_pi"].min()) for t in result.tokens.values())
    for ax, (name, t) in zip(axes, result.tokens.items()):
        x = np.arange(len(t))
        ax.bar(x - 0.19, t["log_mu"], width=0.38, label=r"sampler: $\log\mu$", color="tab:orange")
        ax.bar(x + 0.19, t["log_pi"], width=0.38, label=r"trainer: $\log\pi$", color="tab:blue")
        for i, g in enumerate(t["gap"]):
            ax.annotate(f"{g:+.2g}", (i, 0), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8)
        b = result.batch.loc[name]
        ax.text(0.98, 0.04, f"whole batch: mean $|\\log\\pi-\\log\\mu|$ = {b.mean_abs_gap:.2g}\n"
                f"over {b.tokens:.0f} sampled tokens", transform=ax.transAxes, ha="right", va="bottom", fontsize=8)
        ax.set_xticks(x, [repr(s)[1:-1] if s != "<eos>" else s for s in t["token"]])
        ax.axhline(0, color="k", lw=0.6)
        ax.set(title=SAMPLERS[name].format(k=result.staleness),
               xlabel=f"tokens it sampled after the prompt {result.prompt!r}", ylim=(1.25 * low, 0.9))
    axes[0].set_ylabel("log-probability of the sampled token")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.text(0.5, 0.99, r"gap $\log\pi-\log\mu$ above each token", ha="center", va="top", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


# ----------------------------------------------------------------------------- reading time
def reading_words(text: str, sections: list[str] | None = None, preamble: bool = True,
                  skip: str | None = None) -> int:
    """Words a reader reads on a MyST page: prose, admonitions, tables, display maths (a symbol or a
    letter counts as a word) and visible code; not the front matter, markup, hidden cells
    (`remove-cell`, `remove-input`), folded dropdowns, exercises and references.  With `sections`,
    only those sections (by exact title), after the text before the first `## ` heading unless
    `preamble` is false.  `skip`: a regular expression of text the reader skips."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.split(r"\n## (?:Exercises|References)\n", text)[0]
    if sections is not None:
        parts = re.split(r"(?m)^## ", text)
        found = {p.split("\n", 1)[0].strip(): p for p in parts[1:]}
        missing = [s for s in sections if s not in found]
        if missing:
            raise KeyError(f"no section {missing}; the page has {list(found)}")
        text = (parts[0] if preamble else "") + "".join(found[s] for s in sections)
    if skip:
        text = re.sub(skip, " ", text, flags=re.S)
    text = re.sub(r"```\{code-cell\}[^\n]*\n:tags: \[[^\]]*remove-(?:cell|input)[^\]]*\]\n.*?```", "", text, flags=re.S)
    text = re.sub(r"````\{(?:admonition\}[^\n]*\n:class: dropdown|dropdown\}[^\n]*)\n.*?\n````", "", text, flags=re.S)
    text = re.sub(r"```\{admonition\}[^\n]*\n:class: dropdown\n.*?\n```", "", text, flags=re.S)
    # markup: code-cell fences, other fences (an admonition's title stays), directive options
    text = re.sub(r"(?m)^\s*`{3,}(\{code-cell\}.*$|\{[^}]*\})?|^\s*:[\w-]+:.*$", "", text)
    return count_words(text)


def count_words(text: str) -> int:
    """Words and numbers (a symbol of a formula counts as a word)."""
    return len(re.findall(r"[A-Za-z][A-Za-z'-]*|\d+(?:\.\d+)?", text))


# ----------------------------------------------------------------------------- the 45-minute path
PAGE = "book/book_in_45_minutes"
TABLE_ROWS = ["stale_severe", "precision"]
"""The decision table's rows the path shows: the stale sampler that collapses runs here (the live
step's) and the precision mismatch of the post and of the intro's figure.  The other rows are read
where the path's "Deepened by" links send the reader."""
TABLE_COLUMNS = ["situation", "start from", "what the runs say", "how sure"]
"""The table's columns the path shows: not the signal in a log nor the result files behind a row
(for a practitioner's second reading, in the chapters that render the whole table)."""
TABLE_WPM = READING_WPM / 2
"""Words per minute for a table: a cell is read against its row and its column, at half the rate."""

PATH = [
    # step: also the title of its section on the 45-minute page, read with it; page and sections:
    # what it sends the reader to read (None: the whole page, []: the text before its first section);
    # run: minutes at the keyboard besides reading (the docstring below); deepens: the chapter that
    # takes it further
    dict(step="Step 0: setup", page=None, sections=None, run=2.0, deepens="workshop"),
    # the intro: its key idea and the paragraph under its figure (the figure is on the path's page)
    dict(step="One set of weights, two engines", page="book/intro", sections=[], run=0.0,
         skip=r"```\{glue:figure\}.*?\n```|On this book's tiny models.*", deepens="ch_mismatch_sources"),
    dict(step="The primer", page="book/primer", sections=None, run=2.0, deepens="ch02_sga_lens"),
    # the collapse chapter: its key idea and its Summary (its figure is on the path's page)
    dict(step="How a stale sampler collapses a run", page="book/ch_when_speed_kills",
         sections=["Summary"], skip=r"```\{glue:figure\}.*?(?=Summary\n)", run=0.0,
         deepens="ch_when_speed_kills"),
    dict(step="Which correction when", page="decision-table", sections=TABLE_ROWS, run=0.0,
         deepens="ch05_rollout_correction"),
    dict(step="Lab 1: your first RL run", page="labs/lab01_first_rl_run",
         sections=["The warm start", "One batch, taken apart"], run=2.0, deepens="ch01_rl_on_one_page"),
    dict(step="A stale sampler, with and without bypass, live", page=None, sections=None, run=2.0,
         deepens="lab_when_speed_kills"),
]
"""The book in 45 minutes (book/book_in_45_minutes.md).  `run` is an allowance, not a measurement,
for what is not reading: Step 0's commands and `rl-lab doctor` (the install itself runs while the
reader reads the intro: README.md, "Labs only", times it), trying the primer's cell with numbers of
one's own, Lab 1's first cells and their output (seconds to run, a table to read), and the two live
runs (the page prints the time they took when it was built)."""
OWN_SECTIONS = ["The path", "Where to go next"]
"""The 45-minute page's sections that are no step: read with its key idea, as a step of their own."""


def path_minutes(root, table: str) -> pd.DataFrame:
    """One row per step of PATH (its section of the 45-minute page plus what it sends the reader to
    read), and a last row for the page's own opening: words, reading minutes (prose at READING_WPM,
    the decision table at TABLE_WPM), run minutes (the allowances of PATH), minutes.  `table`: the
    decision table as the page renders it, `rl_lab.book_ext.decisions.markdown_table(TABLE_ROWS,
    cols=TABLE_COLUMNS)` (book_ext is Sphinx's, not imported here).  The intro and the page both
    quote its total, so they cannot disagree."""
    from pathlib import Path

    read = lambda page: (Path(root) / f"{page}.md").read_text(encoding="utf-8")  # noqa: E731
    here = read(PAGE)
    rows = []
    for s in PATH:
        words = reading_words(here, [s["step"]], preamble=False)
        reading = words / READING_WPM
        if s["page"] == "decision-table":
            words += count_words(table)
            reading += count_words(table) / TABLE_WPM
        elif s["page"] is not None:
            more = reading_words(read(s["page"]), s["sections"], skip=s.get("skip"))
            words += more
            reading += more / READING_WPM
        rows.append({"step": s["step"], "words": words, "reading": reading, "run": s["run"],
                     "deepened by": s["deepens"]})
    own = reading_words(here, OWN_SECTIONS)
    rows.append({"step": "This page: its key idea, the path, where to go next", "words": own,
                 "reading": own / READING_WPM, "run": 0.0, "deepened by": "intro"})
    out = pd.DataFrame(rows)
    out["minutes"] = out["reading"] + out["run"]
    return out


__all__ = ["PATH", "READING_WPM", "TABLE_COLUMNS", "TABLE_ROWS", "TABLE_WPM", "TwoEngines", "count_words",
           "figure", "path_minutes", "reading_words", "two_engines"]
