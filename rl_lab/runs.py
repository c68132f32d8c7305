"""A run's folder (RLConfig.output_dir) and its checkpoints: what the Trainer and `rl-lab train`
write there, and how a run continues.

    run/config.yaml                  the config in force (an earlier one, when a continued run
    run/config.until-step-N.yaml     changed it, kept under the step it ran until)
    run/metrics.jsonl                one strict-JSON row per step
    run/checkpoint-N/                weights, tokenizer, trainer_state.pt (optimizer, RNGs, step)
    run/latest_checkpoint            names the newest checkpoint of the run that wrote it
    run/final/                       the model at the end

Every write is atomic (a temporary copy moved into place), so a run killed at any instant
leaves a folder that `RunFolder.recover` repairs and `Trainer.resume` continues bit for bit.
Two runs never mix in one folder: `RunFolder.begin`, the one way a run takes its folder on
(`Trainer.train` calls it; `rl-lab train` asks `RunFolder.check`, its refusals alone, before torch
loads), refuses a second run unless it continues the first (resume) or deletes it (overwrite).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from rl_lab.config import RLConfig
from rl_lab.errors import ConfigError
from rl_lab.models import quiet_hf_progress
from rl_lab.utils import atomic_replace_dir, atomic_write_text, json_line, read_jsonl, recover_replaced_dir, remove_dir

CHECKPOINT_RE = re.compile(r"checkpoint-(\d+)")
LATEST = "latest_checkpoint"          # names the newest checkpoint of the run that wrote it
STATE = "trainer_state.pt"            # in a checkpoint: tensors and plain containers only


def config_changes(saved: dict, config: RLConfig) -> dict[str, tuple]:
    """{field: (saved value, value in `config`)} for the fields that differ from a saved
    config.yaml (output_dir, and fields the saved file does not have, are not compared); a nested
    config's knobs are named one by one ("empg.k"), a nested config turned on or off as a whole."""
    try:
        before = RLConfig.from_dict({k: v for k, v in saved.items()}).to_dict()
    except (ConfigError, TypeError):
        before = dict(saved)
    now = config.to_dict()
    changes = {}
    for k in now:
        if k == "output_dir" or k not in before or before[k] == now[k]:
            continue
        if isinstance(before[k], dict) and isinstance(now[k], dict) and k != "task_kwargs":   # a nested config
            changes.update({f"{k}.{n}": (before[k].get(n), v) for n, v in now[k].items() if before[k].get(n) != v})
        else:
            changes[k] = (before[k], now[k])
    return changes


def _saved_void_filter(saved: dict, path) -> dict:
    """A config.yaml written before issue 53 saved `mask_void_turns: true` for rl_lab's filter of
    that time, which dropped void episodes from the loss and the group statistics; `true` now means
    SimpleTIR's loss-only filter.  A saved run keeps what it ran (scope "loss_and_groups"), with a
    ConfigWarning; this version saves the mapping ({scope: ...}), so a bare true is always an old file."""
    if saved.get("mask_void_turns") is not True:
        return saved
    import warnings

    from rl_lab.errors import ConfigWarning
    warnings.warn(f"{path}: mask_void_turns: true was written before the void filter had a scope; the run "
                  "keeps the filter it ran with, mask_void_turns.scope=loss_and_groups (SimpleTIR's own "
                  "filter is scope loss: --set mask_void_turns.scope=loss)", ConfigWarning, stacklevel=3)
    return {**saved, "mask_void_turns": {"scope": "loss_and_groups"}}


def check_resume_overwrite(resume: bool, overwrite: bool, output_dir) -> None:
    """resume continues the run in `output_dir`, overwrite deletes it: never both."""
    if resume and overwrite:
        raise ConfigError(f"resume (--resume) continues the run in {output_dir} and overwrite (--overwrite) "
                          "deletes it: choose one")


def save_model(model, tokenizer, path: str | Path) -> None:
    """Weights (safetensors) and tokenizer, written to a temporary folder and moved into `path`."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_hf_progress():
        model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    atomic_replace_dir(tmp, path)


def load_checkpoint(path: str | Path, model, device) -> dict:
    """Load a checkpoint's weights into `model` (which must match them) and return its trainer
    state, read with torch.load(weights_only=True): a checkpoint folder never runs code."""
    from safetensors.torch import load_file

    path = Path(path)
    weights = load_file(path / "model.safetensors", device=str(device))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or any("lm_head" not in k for k in missing):  # lm_head is tied
        raise RuntimeError(f"checkpoint {path} does not match the model: "
                           f"missing {missing}, unexpected {unexpected}")
    import torch  # here, not at the top: the command line checks a run folder before loading torch

    return torch.load(path / STATE, map_location=device, weights_only=True)


class RunFolder:
    """The files of one run in `path` (RLConfig.output_dir)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def config_path(self) -> Path:
        return self.path / "config.yaml"

    # ------------------------------------------------------------------ a run begins
    @classmethod
    def check(cls, config: RLConfig, resume: bool = False, overwrite: bool = False) -> RunFolder | None:
        """What `begin` refuses, checked without writing anything: resume with overwrite, and a
        folder that holds a run when neither continues nor deletes it.  The folder of
        config.output_dir (None when the config has none)."""
        check_resume_overwrite(resume, overwrite, config.output_dir)
        if not config.output_dir:
            return None
        folder = cls(config.output_dir)
        if not (resume or overwrite):
            folder.refuse_if_taken()
        return folder

    @classmethod
    def begin(cls, config: RLConfig, resume: bool = False, overwrite: bool = False,
              step: int = 0) -> RunFolder | None:
        """Take config.output_dir on for a run that starts at `step`: refused as `check` says, its
        files deleted first with `overwrite`, then the folder made, metrics.jsonl trimmed to `step`
        (none at step 0: also a resume that found no checkpoint) and config.yaml written.  The
        folder (None when the config has none)."""
        folder = cls.check(config, resume, overwrite)
        if folder is not None:
            if overwrite:
                folder.clear()
            folder.path.mkdir(parents=True, exist_ok=True)
            folder.trim_metrics(step)
            folder.write_config(config, step)
        return folder

    # ------------------------------------------------------------------ what is there
    def checkpoints(self, complete: bool = False) -> dict[int, Path]:
        """{step: folder} of the `checkpoint-N` folders (not `.old`, temp or half-deleted ones);
        with `complete`, only those holding a trainer state."""
        found = {}
        for p in self.path.glob("checkpoint-*"):
            m = CHECKPOINT_RE.fullmatch(p.name)
            if m and p.is_dir() and (not complete or (p / STATE).exists()):
                found[int(m.group(1))] = p
        return found

    def describe(self) -> str | None:
        """What an earlier run left here (None when the folder holds none of a run's files)."""
        if not self.path.is_dir():
            return None
        parts = []
        if self.metrics_path.exists():
            rows = read_jsonl(self.metrics_path)
            steps = f", steps {rows[0].get('step')}-{rows[-1].get('step')}" if rows else ""
            parts.append(f"metrics.jsonl ({len(rows)} rows{steps})")
        ckpts = self.checkpoints()
        if ckpts:
            parts.append(", ".join(ckpts[s].name for s in sorted(ckpts)))
        if (self.path / "final").exists():
            parts.append("final/")
        if self.config_path.exists():
            parts.append("config.yaml")
        return "; ".join(parts) or None

    def refuse_if_taken(self) -> None:
        """Raise ConfigError when the folder already holds a run: a new run would mix into it."""
        found = self.describe()
        if found:
            out = self.path
            raise ConfigError(
                f"{out} already holds a run: {found}.  Continue it with resume (`rl-lab train --out {out} "
                f"--resume`, adding --set KEY=VALUE to change a field; Trainer.train(resume=True)) or start "
                f"over with overwrite (`rl-lab train ... --overwrite`; Trainer.train(overwrite=True)), "
                f"which deletes those files first")

    def clear(self) -> None:
        """Delete a run's files (metrics, config, checkpoints, final model and their temporary
        copies); anything else in the folder stays."""
        if not self.path.is_dir():
            return
        patterns = ("metrics.jsonl", "metrics.png", "config.yaml", "config.until-step-*.yaml", LATEST,
                    "checkpoint-*", ".checkpoint-*", "final", "final.*", ".final.*", ".metrics.jsonl.*",
                    ".config.yaml.*")
        for pattern in patterns:
            for p in self.path.glob(pattern):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ config.yaml
    def saved_config(self) -> dict | None:
        """The mapping in config.yaml (None when there is none, or it is not a YAML mapping)."""
        if not self.config_path.exists():
            return None
        try:
            saved = yaml.safe_load(self.config_path.read_text()) or {}
        except yaml.YAMLError:
            return None
        return _saved_void_filter(saved, self.config_path) if isinstance(saved, dict) else None

    def config_changes(self, config: RLConfig) -> dict[str, tuple]:
        """`config_changes` against config.yaml ({} when there is none)."""
        saved = self.saved_config()
        return config_changes(saved, config) if saved is not None else {}

    def write_config(self, config: RLConfig, step: int) -> None:
        """config.yaml is the config in force; a run continued at `step` > 0 whose config changed
        keeps the earlier one as config.until-step-<step>.yaml."""
        path = self.config_path
        if path.exists() and step > 0 and self.config_changes(config):
            atomic_write_text(self.path / f"config.until-step-{step}.yaml", path.read_text())
        atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))

    # ------------------------------------------------------------------ metrics.jsonl
    def trim_metrics(self, step: int) -> list[dict]:
        """Keep only the rows up to `step` (the step a run continues from; none at step 0), and
        drop a torn last line; returns the rows kept (as read: non-finite numbers are null)."""
        path = self.metrics_path
        if not path.exists():
            return []
        rows = read_jsonl(path)
        keep = [r for r in rows if r.get("step", 0) <= step]
        if len(keep) != len(rows) or path.stat().st_size != sum(len(json_line(r)) for r in rows):
            atomic_write_text(path, "".join(json_line(r) for r in keep))
        return keep

    def append_metrics(self, row: dict) -> None:
        with open(self.metrics_path, "a") as f:
            f.write(json_line(row))

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, step: int, model, tokenizer, state: dict, keep: int = 2) -> Path:
        """checkpoint-<step>: weights, tokenizer and `state`, written atomically and named in
        `latest_checkpoint`; then the earlier checkpoints beyond `keep` - 1 are removed."""
        final = self.path / f"checkpoint-{step}"
        tmp = self.path / f".checkpoint-{step}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        with quiet_hf_progress():
            model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        import torch

        torch.save(state, tmp / STATE)
        atomic_replace_dir(tmp, final)
        atomic_write_text(self.path / LATEST, final.name + "\n")
        # rotation among the checkpoints before this one: the one just written always stays, and
        # a higher step number (an older run's, left in the folder) is not this run's to delete
        ckpts = self.checkpoints()
        earlier = sorted(s for s in ckpts if s < step)
        for s in earlier[:max(0, len(earlier) - (keep - 1))]:
            remove_dir(ckpts[s])
        return final

    def recover(self) -> None:
        """Repair what a process killed during a save left: a checkpoint moved aside to
        `checkpoint-N.old` goes back (or goes, if its replacement is in place), and temporary
        and half-deleted folders are removed."""
        for old in self.path.glob("checkpoint-*.old"):
            recover_replaced_dir(old.with_name(old.name[:-len(".old")]))
        for junk in list(self.path.glob(".checkpoint-*.tmp")) + list(self.path.glob(".*.del")):
            shutil.rmtree(junk, ignore_errors=True)

    def last_checkpoint(self) -> Path | None:
        """The newest checkpoint of the run that last saved here (named in `latest_checkpoint`),
        else the complete checkpoint with the highest step (after `recover`)."""
        if not self.path.exists():
            return None
        self.recover()
        ckpts = self.checkpoints(complete=True)
        latest = self.path / LATEST
        if latest.exists():
            m = CHECKPOINT_RE.fullmatch(latest.read_text().strip())
            if m and int(m.group(1)) in ckpts:
                return ckpts[int(m.group(1))]
        return ckpts[max(ckpts)] if ckpts else None
