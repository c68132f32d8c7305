"""A task's demonstrations as supervised (SFT) batches: prompt + the task's solution + <eos>, with
labels only on the tokens the model is to write.  The warm start trains on them
(rl_lab.tools.warmstart) and the imitation method adds their NLL to the RL loss (rl_lab.algos.hybrid).

A tool task's demonstration is multi-turn: its model turns with the real tool's output between
them (`task.trace_segments`); the tool's output conditions what follows but is never trained on.
"""
from __future__ import annotations

import torch


def target_segments(task, example) -> list[tuple[str, bool]]:
    """The demonstration as (text, is_environment) pieces.  A tool task (one with
    `trace_segments`) gives its model turns with the real tool's output between them, as the
    environment formats it; any other task gives its whole `target` as one model piece."""
    if hasattr(task, "trace_segments"):
        return task.trace_segments(example)
    return [(task.target(example), False)]


def sft_example(tok, task, example) -> tuple[list[int], list[int]]:
    """(ids, labels) of prompt + demonstration + <eos>.  Labels are -100 on the prompt and on
    the environment's tokens (a tool's output conditions what follows but is never trained
    on: the model does not learn to write it), the ids elsewhere."""
    ids = tok(example["prompt"])["input_ids"]
    labels = [-100] * len(ids)
    for text, is_env in target_segments(task, example):
        piece = tok(text, add_special_tokens=False)["input_ids"]
        ids += piece
        labels += [-100] * len(piece) if is_env else piece
    return ids + [tok.eos_token_id], labels + [tok.eos_token_id]


def sft_batch(tok, task, examples):
    """Right-padded prompt+answer+<eos> ids, attention mask and labels (-100 off the answer,
    and off a tool's output in a multi-turn demonstration: `sft_example`)."""
    ids, labels = [], []
    for e in examples:
        x, y = sft_example(tok, task, e)
        ids.append(x)
        labels.append(y)
    L = max(map(len, ids))
    input_ids = torch.full((len(ids), L), tok.pad_token_id)
    label_t = torch.full((len(ids), L), -100)
    attn = torch.zeros((len(ids), L), dtype=torch.long)
    for i, (x, y) in enumerate(zip(ids, labels)):
        input_ids[i, : len(x)], label_t[i, : len(y)], attn[i, : len(x)] = torch.tensor(x), torch.tensor(y), 1
    return input_ids, attn, label_t
