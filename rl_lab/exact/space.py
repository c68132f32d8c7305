"""Enumerating every sequence: the tree of V**T sequences and their prefixes (contexts).

A sequence y = (y_1..y_T) over the vocabulary {0..V-1} has the *code* k in [0, V**T) whose
base-V digits, most significant first, are y_1..y_T.  The prefix y_<t (t = 0..T-1, zero-based:
y_<0 is empty) is a *context*; the V**t contexts of depth t have codes j in [0, V**t), and the
flat index offsets[t] + j.  Everything per (context, next token) is a table of shape
(n_contexts, V); everything per (sequence, position) a table of shape (N, T) whose row k is the
sequence with code k, exactly like a (B, T) batch of sampled completions.

Two reshapes move between the two layouts without any index tensor: the values of depth t,
flattened, are indexed by the code of y_<=t, and sequence k extends the prefix k // V**(T-t-1).
"""
from __future__ import annotations

import torch

from rl_lab.errors import ConfigError

DTYPE = torch.float64
MAX_SEQUENCES = 2 ** 22  # ~4M: (N, T) float64 tables stay below a few hundred MB


def _sum_middle(x: torch.Tensor) -> torch.Tensor:
    """(n, k, *rest) -> (n, *rest) sum over k.  Without trailing dims a product with a vector of
    ones: far faster than .sum(1) when k is as small as V."""
    if x.dim() == 2:
        return x @ torch.ones(x.shape[1], dtype=x.dtype, device=x.device)
    return x.sum(1)


class SequenceSpace:
    """All V**T sequences of T tokens, their prefixes, and the moves between the two layouts."""

    def __init__(self, vocab_size: int, horizon: int, max_sequences: int = MAX_SEQUENCES):
        if not isinstance(vocab_size, int) or vocab_size < 2:
            raise ConfigError(f"SequenceSpace.vocab_size={vocab_size!r} must be an int >= 2")
        if not isinstance(horizon, int) or horizon < 1:
            raise ConfigError(f"SequenceSpace.horizon={horizon!r} must be an int >= 1")
        if vocab_size ** horizon > max_sequences:
            raise ConfigError(f"SequenceSpace: vocab_size**horizon = {vocab_size}**{horizon} = "
                              f"{vocab_size ** horizon:,} sequences exceeds max_sequences="
                              f"{max_sequences:,}; lower vocab_size or horizon")
        self.V, self.T = vocab_size, horizon
        self.N = vocab_size ** horizon
        self.level_sizes = [vocab_size ** t for t in range(horizon)]       # contexts per depth
        self.offsets = [sum(self.level_sizes[:t]) for t in range(horizon + 1)]
        self.n_contexts = self.offsets[-1]

    def __repr__(self):
        return f"SequenceSpace(V={self.V}, T={self.T}: {self.N:,} sequences, {self.n_contexts:,} contexts)"

    def level(self, table: torch.Tensor, t: int) -> torch.Tensor:
        """(n_contexts, ...) -> (V**t, ...): the rows of the contexts of depth t."""
        return table[self.offsets[t]:self.offsets[t + 1]]

    def depth(self) -> torch.Tensor:
        """(n_contexts,) long: the depth t (prefix length) of every context."""
        return torch.repeat_interleave(torch.arange(self.T), torch.tensor(self.level_sizes))

    def per_token(self, table: torch.Tensor) -> torch.Tensor:
        """(n_contexts, V) value per (context, token) -> (N, T) value at (sequence y, position t),
        i.e. out[y, t] = table[y_<t, y_t].  Stored column by column (strides (1, N)), so that
        every position is one contiguous vector."""
        out = torch.empty(self.T, self.N, dtype=table.dtype, device=table.device)
        for t in range(self.T):
            nodes = self.level(table, t).reshape(-1)                   # (V**(t+1),) by code of y_<=t
            out[t].view(nodes.shape[0], -1).copy_(nodes[:, None].expand(-1, self.V ** (self.T - t - 1)))
        return out.t()                                                 # (N, T)

    def per_context(self, values: torch.Tensor) -> torch.Tensor:
        """(N, T) values -> (n_contexts, V): out[c, a] = sum of values[y, t] over the sequences y
        whose prefix y_<t is c and whose token y_t is a (the adjoint of per_token).
        A (N, 1) column counts as the same value at every position."""
        values = values.expand(-1, self.T)
        rows = [_sum_middle(values[:, t].reshape(self.V ** (t + 1), -1)).reshape(self.V ** t, self.V)
                for t in range(self.T)]
        return torch.cat(rows)                                         # (n_contexts, V)

    def path_sum(self, table: torch.Tensor) -> torch.Tensor:
        """(n_contexts, V, *rest) -> (N, *rest): sum_t table[y_<t, y_t] along every sequence,
        level by level in O(N) (per_token(table).sum(1) without the (N, T) table)."""
        acc = torch.zeros((1, *table.shape[2:]), dtype=table.dtype, device=table.device)
        for t in range(self.T):
            acc = (acc[:, None] + self.level(table, t)).reshape(self.V ** (t + 1), *table.shape[2:])
        return acc

    def subtree_sum(self, values: torch.Tensor) -> torch.Tensor:
        """(N, *rest) -> (n_contexts, V, *rest): for every (context, token) node, the sum of
        values over the sequences that pass through it.  The adjoint of path_sum, O(N)."""
        nodes, rows, rest = values, [], values.shape[1:]
        for t in reversed(range(self.T)):                              # sums over y extending y_<=t
            nodes = _sum_middle(nodes.reshape(self.V ** (t + 1), -1, *rest))
            rows.append(nodes.reshape(self.V ** t, self.V, *rest))
        return torch.cat(rows[::-1])

    def prefix_probs(self, logp: torch.Tensor):
        """(n_contexts, V) next-token log-probs -> ((n_contexts,) probability of reaching every
        context, the visitation d_t(c) for c of depth t; (N,) probability of every sequence)."""
        probs, reach = logp.exp(), [torch.ones(1, dtype=logp.dtype, device=logp.device)]
        for t in range(self.T):
            reach.append((reach[-1][:, None] * self.level(probs, t)).reshape(-1))
        return torch.cat(reach[:-1]), reach[-1]

    def tokens(self) -> torch.Tensor:
        """(N, T) long: every sequence, row k = the sequence with code k."""
        k = torch.arange(self.N)
        powers = torch.tensor([self.V ** (self.T - 1 - t) for t in range(self.T)])
        return (k[:, None] // powers) % self.V

    def context_tokens(self, t: int) -> torch.Tensor:
        """(V**t, t) long: the prefix tokens of every context of depth t."""
        j = torch.arange(self.V ** t)
        powers = torch.tensor([self.V ** (t - 1 - s) for s in range(t)], dtype=torch.long)
        return (j[:, None] // powers) % self.V

    def gather(self, table: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """(n_contexts, V) table, (B,) sequence codes -> (B, T) table[y_<t, y_t] for those
        sequences only (what per_token gives for the rows `codes`, without building (N, T))."""
        cols = []
        for t in range(self.T):
            node = codes // self.V ** (self.T - t - 1)                   # code of y_<=t
            cols.append(table[self.offsets[t] + node // self.V, node % self.V])
        return torch.stack(cols, dim=1)                                # (B, T)

    def sample(self, logp: torch.Tensor, n: int, generator: torch.Generator | None = None):
        """Draw n sequences token by token from the next-token log-probs (n_contexts, V), as a
        sampler would.  Returns (n,) sequence codes."""
        code = torch.zeros(n, dtype=torch.long)
        for t in range(self.T):
            probs = logp[self.offsets[t] + code].exp()                 # (n, V)
            code = code * self.V + torch.multinomial(probs, 1, generator=generator).squeeze(1)
        return code
