"""Small helpers: device choice, seeding, atomic file writes.  torch loads in the functions that
use it, so the file helpers (a sweep's plan, reading metrics) do not pay for it."""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def pick_device(device: str = "auto") -> torch.device:
    """"auto": CUDA when present, else CPU (or what $RL_LAB_DEVICE says: the unit tests pin it to
    "cpu", where bitwise promises hold).  A GPU is used when there, never required."""
    import torch

    if device == "auto":
        forced = os.environ.get("RL_LAB_DEVICE", "").strip()
        if forced and forced not in ("cpu", "cuda"):
            raise ValueError(f"RL_LAB_DEVICE={forced!r}: use 'cpu' or 'cuda', or unset it")
        if not forced:
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        device = forced
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was asked for but no CUDA GPU is visible; use 'auto' or 'cpu'")
    return torch.device(device)


def generator_on(device: torch.device | str, generator: torch.Generator | None) -> torch.Generator | None:
    """A random generator that can draw tensors on `device`: `generator` itself when it lives
    there, else a new generator on `device` seeded by one draw from `generator` (so the stream
    stays reproducible).  An engine whose weights sit on another device than the trainer (a CPU
    sampler beside a CUDA trainer, or the reverse) samples with it."""
    if generator is None:
        return None
    import torch

    device = torch.device(device)
    same_type = generator.device.type == device.type
    same_index = generator.device.index in (None, 0) and device.index in (None, 0) or generator.device.index == device.index
    if same_type and same_index:
        return generator
    seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator, device=generator.device).item())
    return torch.Generator(device).manual_seed(seed)


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a file so that a reader never sees it half-written (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def recover_replaced_dir(final_dir: Path) -> None:
    """Finish an `atomic_replace_dir` that a killed process left half done.

    Killed between its two renames, `<final>.old` (the previous complete copy) is there and
    `<final>` is not: the old copy goes back.  Killed while deleting `<final>.old` after the
    new copy was in place: the rest of it goes.
    """
    final_dir = Path(final_dir)
    old = final_dir.with_name(final_dir.name + ".old")
    if not old.exists():
        return
    if final_dir.exists():
        remove_dir(old)
    else:
        os.replace(old, final_dir)


def remove_dir(path: Path) -> None:
    """Delete a directory so that a kill midway never leaves a half-deleted one under its name:
    it is renamed to a hidden `.<name>.del` first."""
    path = Path(path)
    if not path.exists():
        return
    trash = path.with_name(f".{path.name.lstrip('.')}.del")
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def atomic_replace_dir(tmp_dir: Path, final_dir: Path) -> None:
    """Move a fully written directory into place, replacing any old one.

    At every instant a complete copy exists under `final_dir` or `<final_dir>.old`; a kill
    in between is repaired by `recover_replaced_dir` (called here and before reading)."""
    final_dir = Path(final_dir)
    recover_replaced_dir(final_dir)
    if final_dir.exists():
        old = final_dir.with_name(final_dir.name + ".old")
        os.replace(final_dir, old)
        os.replace(tmp_dir, final_dir)
        remove_dir(old)
    else:
        os.replace(tmp_dir, final_dir)


def _finite_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    if isinstance(value, np.generic):
        return _finite_or_none(value.item())
    return value


def json_line(row: dict) -> str:
    """One strict-JSON line (NaN and +-inf written as null, which any JSON reader accepts)."""
    return json.dumps(_finite_or_none(row), allow_nan=False) + "\n"


def null_to_nan(rows: list[dict]) -> list[dict]:
    """Rows read from a metrics file with the nulls (non-finite numbers) back as NaN."""
    return [{k: (math.nan if v is None else v) for k, v in r.items()} for r in rows]


def read_metrics(path: str | Path):
    """A run's metrics.jsonl as a pandas DataFrame, nulls as NaN (numeric columns stay float)."""
    import pandas as pd

    return pd.DataFrame(null_to_nan(read_jsonl(path)))


def read_jsonl(path: str | Path) -> list[dict]:
    """Rows of a JSON-lines file; a torn last line (a killed writer) is ignored."""
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows
