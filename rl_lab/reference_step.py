"""One plain GRPO step on one screen: what `Trainer.step` does with the default RLConfig,
without the corrections, monitors, fault handling and speed-ups around it (chapter 1).

    generate with log-probs -> reward -> group advantages -> token-mean PPO-clip loss -> AdamW

Shapes: N prompts, G completions each, B = N * G rows, T completion tokens.
tests/unit/test_reference_step.py checks that `Trainer.step` with the default config gives the same
loss, gradient norm and weights on the same batch.
"""
from __future__ import annotations

import torch

from rl_lab.algos.losses import sequence_logprobs


def reference_grpo_step(model, optimizer, engine, task, examples: list[dict], num_generations: int,
                        sampling, generator: torch.Generator, epsilon: float = 0.2,
                        max_grad_norm: float = 1.0) -> dict:
    N, G = len(examples), num_generations
    # 1. ROLLOUT: G completions per prompt, with the sampler's log-probs (mu)
    engine.sync_weights(model)
    batch = engine.generate([e["prompt"] for e in examples], G, sampling, generator)
    mask = batch.completion_mask.float()                                           # (B, T)

    # 2. REWARD: the task scores each completion against its prompt's answer
    rows = [e for e in examples for _ in range(G)]
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    rewards = torch.tensor(task.reward(prompts=batch.prompts, completions=batch.completions, **columns),
                           dtype=torch.float32)                                    # (B,)

    # 3. GROUP ADVANTAGES: centre and scale the rewards within each prompt's group (verl's eps)
    r = rewards.double().view(N, G)                                                # (N, G)
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)
    adv = adv.view(-1).float().to(mask.device)[:, None]                            # (B, 1)

    # 4. LOSS: PPO-clip on the trainer's log-probs (pi), averaged over all completion tokens
    logp = sequence_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                             share_prefix=False)                                   # (B, T)
    ratio = torch.exp(logp - logp.detach())                                        # (B, T), == 1 here
    per_token = -torch.minimum(ratio * adv, ratio.clamp(1 - epsilon, 1 + epsilon) * adv)
    loss = (per_token * mask).sum() / mask.sum()

    # 5. UPDATE
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return {"reward": rewards.mean().item(), "loss": loss.item(), "grad_norm": grad_norm.item(),
            "batch": batch}
