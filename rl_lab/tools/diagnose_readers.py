"""Reading a run for `rl-lab diagnose`: every input format, the run's own step numbers, and the
settings that can be read without running anything from the run's folder.

Inputs (a file may be gzipped, `.gz`, and may start with a UTF-8 BOM):

* an rl_lab run folder (metrics.jsonl, config.yaml);
* a TRL / HF Trainer output folder: its newest state, the root's trainer_state.json or that of the
  highest `checkpoint-N` (whichever has the larger global_step); or one trainer_state.json;
* verl's file-logger JSONL or console log; a flat JSONL (one object per record);
* a W&B CSV: a history export (`_step`, `train/global_step`, ...) or a panel export
  (`Step`, `<run> - <metric>`, `__MIN`/`__MAX`), with or without HF's `train/` prefix;
* TRL's console: the `{'loss': ..., 'reward': ...}` dicts the Trainer prints.  They carry no step:
  pass `--logging-steps N` (or keep the output folder's trainer_state.json next to them).

Steps come from the run (`train/global_step`, `global_step`, `step`, `Step`, `_step`), never from
the record's position.  A malformed record or an encoding error before the last line is an error
naming the file and line; only a torn last line (a live writer's) is dropped, with a warning.
"""
from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import re
from pathlib import Path

import numpy as np

from rl_lab.errors import ConfigError
from rl_lab.tools.metric_names import BY_NAME

STEP_COLUMNS = ("train/global_step", "trainer/global_step", "training/global_step", "global_step", "step",
                "Step", "_step")
"""Step columns, the trainer's own first: W&B's `_step` counts log calls, not optimizer steps."""
EXTRA_NAMES = {"critic/rewards/mean": "reward",          # a fallback when critic/score/mean is absent
               "actor/entropy_loss": "entropy"}         # older verl (May 2025 still) logged the mean entropy so
TRL_SUMMARY = "train_runtime"                            # the Trainer's last record: totals, not a step


# ----------------------------------------------------------------------------------- names
def _verl_names() -> dict:
    from rl_lab.integrations.verl import VERL_TO_RL_LAB_METRICS
    return VERL_TO_RL_LAB_METRICS


def _rename(columns: list[str], mapping: dict | None = None) -> dict:
    """Column -> rl_lab name: `mapping` (--map) first, then the libraries' names
    (rl_lab.tools.metric_names, verl's), matched as logged, without W&B's '<run> - ' prefix, then
    without HF's 'train/' prefix."""
    verl, by_column = _verl_names(), {v: k for k, v in (mapping or {}).items()}
    out = {}
    for col in columns:
        if col in by_column:
            out[col] = by_column[col]
            continue
        name = col.split(" - ", 1)[1] if " - " in col else col
        bare = name[len("train/"):] if name.startswith("train/") else None
        out[col] = (BY_NAME.get(name) or verl.get(name)
                    or (bare is not None and (BY_NAME.get(bare) or verl.get(bare))) or bare or name)
    for col, name in list(out.items()):
        if name in EXTRA_NAMES and EXTRA_NAMES[name] not in out.values():
            out[col] = EXTRA_NAMES[name]
    return out


def frame(rows: list[dict], source: str, mapping: dict | None = None, warnings: list | None = None):
    """The records as one row per step (the run's own step column), columns under rl_lab's names."""
    import pandas as pd

    df = pd.DataFrame(rows)
    found = [str(c) for c in df.columns]
    present = [c for c in STEP_COLUMNS if c in df.columns]
    if not present:
        raise ConfigError(f"{source}: no step column (looked for {', '.join(STEP_COLUMNS)}; found "
                          f"{', '.join(found[:40]) or 'none'}): a record's position is not a step")
    steps = pd.to_numeric(df[present[0]], errors="coerce")
    for c in present[1:]:                          # a record without the first column: the next one's step
        steps = steps.fillna(pd.to_numeric(df[c], errors="coerce"))
    df = df.drop(columns=[c for c in STEP_COLUMNS if c in df.columns])
    df = df.rename(columns=_rename(list(df.columns), mapping))
    df = df.loc[:, ~df.columns.duplicated()]
    df["step"] = steps
    df = df[df["step"].notna()]
    numeric = {c: pd.to_numeric(df[c], errors="coerce") for c in df.columns}
    df = pd.DataFrame(numeric).groupby("step", as_index=False).last().sort_values("step").reset_index(drop=True)
    df["step"] = df["step"].astype(int)
    df.attrs.update(source=source, columns_found=found, warnings=list(warnings or []))
    return df


# ----------------------------------------------------------------------------------- text
def read_text(p: Path, warnings: list | None = None) -> str:
    """The file's text: gunzipped when it is gzip, UTF-8 (a BOM dropped).  An undecodable byte is
    an error with its line, unless it is in the last line (a torn write: that line is dropped, with
    a warning appended to `warnings`)."""
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise ConfigError(f"{p}: a gzip file that cannot be read whole ({e})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        if b"\n" not in raw[e.start:].rstrip(b"\n"):
            head = raw[:raw.rfind(b"\n", 0, e.start) + 1]
            if warnings is not None:
                warnings.append(f"{p.name}:{line}: the last line is not UTF-8 (a run still writing?); dropped")
            return head.decode("utf-8-sig")
        raise ConfigError(f"{p}:{line}: not UTF-8 ({e.reason} at byte {e.start}); re-export the log as "
                          "UTF-8") from None


def _records(p: Path, text: str, parse, what: str, warnings: list) -> list:
    """Parse every non-blank line with `parse`; a bad line is an error naming the file and line,
    except the last one (a live writer's torn line), dropped with a warning."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    out = []
    for i, (n, line) in enumerate(lines):
        try:
            out.append(parse(line))
        except (ValueError, SyntaxError) as e:
            if i == len(lines) - 1:
                warnings.append(f"{p.name}:{n}: the last line is not a whole {what} (a run still writing?); "
                                "dropped")
                break
            raise ConfigError(f"{p}:{n}: not a {what} ({e}); fix or remove that line") from None
    return out


def _json_object(line: str) -> dict:
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError(f"a JSON {type(value).__name__}, not an object")
    return value


_CONSOLE_DICT = re.compile(r"^\s*\{'")


def _console_dict(line: str) -> dict:
    value = ast.literal_eval(line.strip())        # literals only: nothing in the log is run
    if not isinstance(value, dict):
        raise ValueError("not a dict")
    return value


# ----------------------------------------------------------------------------------- formats
def load_run(path: str | Path, mapping: dict | None = None, logging_steps: int | None = None):
    """A run's per-step metrics under rl_lab's names (a DataFrame with `step`; attrs: source,
    warnings, columns_found, framework, folder).  Raises ConfigError saying what was expected."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such file or folder")
    if p.is_dir():
        return _load_folder(p, mapping)
    name = p.name[:-3] if p.name.lower().endswith(".gz") else p.name
    warnings: list = []
    text = read_text(p, warnings)
    if name.lower().endswith(".csv"):
        return _tag(_csv_frame(p, text, mapping, warnings), framework=None)
    stripped = text.lstrip()
    if stripped.startswith("{") and not _CONSOLE_DICT.match(stripped):
        whole = _whole_json(text)
        if isinstance(whole, dict) and "log_history" in whole:
            return _tag(_trainer_state_frame(p, whole, mapping), framework="trl")
        if whole is None and '"log_history"' in text[:200_000]:
            raise ConfigError(f"{p}: a trainer_state.json that is not whole JSON (cut off while being written?); "
                              "read a checkpoint's trainer_state.json instead")
        if isinstance(whole, dict) and not ("data" in whole and "step" in whole):
            return _tag(frame([whole], f"flat JSONL {p.name}", mapping), framework=None)
        rows = _records(p, text, _json_object, "JSON object", warnings)
        if rows and "data" in rows[0] and "step" in rows[0]:
            return _tag(_verl_frame(p, mapping), framework="verl")
        return _tag(frame(rows, f"flat JSONL {p.name}", mapping, warnings), framework=None)
    if any(_CONSOLE_DICT.match(line) for line in text.splitlines()[:2000]):
        return _tag(_console_frame(p, text, mapping, logging_steps, warnings), framework="trl")
    return _tag(_verl_frame(p, mapping), framework="verl")


def _tag(df, framework: str | None, folder: Path | None = None):
    df.attrs.setdefault("framework", framework)
    df.attrs.setdefault("folder", str(folder) if folder else None)
    return df


def _whole_json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _csv_frame(p: Path, text: str, mapping, warnings):
    rows = list(csv.DictReader(io.StringIO(text)))
    rows = [{k: v for k, v in row.items() if k and not k.endswith(("__MIN", "__MAX"))} for row in rows]
    return frame(rows, f"CSV {p.name}", mapping, warnings)


def _trainer_state_frame(p: Path, state: dict, mapping):
    """trainer_state.json's log_history: one record per logged step (`step` is the global step);
    the Trainer's final summary record (train_runtime, train_loss) is not a step."""
    rows = [r for r in state.get("log_history", []) if isinstance(r, dict) and TRL_SUMMARY not in r]
    if not rows:
        raise ConfigError(f"{p}: trainer_state.json with an empty log_history (nothing logged yet: "
                          "logging_steps is larger than the steps run?)")
    df = frame(rows, f"trainer_state.json {p.parent.name}/{p.name}" if p.parent.name else p.name, mapping)
    df.attrs["logging_steps"] = state.get("logging_steps")
    df.attrs["max_steps"] = state.get("max_steps")
    return df


def _console_frame(p: Path, text: str, mapping, logging_steps, warnings):
    """TRL's printed dicts.  Their values are strings ('0.3125'); they carry no step, so the n-th
    record is step n x logging_steps, from --logging-steps or a trainer_state.json beside the file."""
    lines = "\n".join(line for line in text.splitlines() if _CONSOLE_DICT.match(line))
    rows = [r for r in _records(p, lines, _console_dict, "printed dict", warnings) if TRL_SUMMARY not in r]
    if logging_steps is None:
        state = _whole_json(read_text(p.parent / "trainer_state.json")) \
            if (p.parent / "trainer_state.json").is_file() else None
        logging_steps = state.get("logging_steps") if isinstance(state, dict) else None
    if not logging_steps:
        raise ConfigError(f"{p}: TRL's printed log dicts carry no step; pass --logging-steps N (the run's "
                          "logging_steps; TRL's default is 10), or read the output folder's trainer_state.json")
    rows = [{**r, "step": (i + 1) * int(logging_steps)} for i, r in enumerate(rows)]
    df = frame(rows, f"TRL console {p.name}", mapping, warnings + [
        f"steps are record number x logging_steps={logging_steps} (the console has no step)"])
    df.attrs["logging_steps"] = logging_steps
    return df


def _verl_frame(p: Path, mapping):
    from rl_lab.integrations.verl import read_verl_records
    rows = [{"step": step, **data} for step, data in read_verl_records(p)]
    if not rows:
        raise ConfigError(f"{p}: no records found. Expected a trainer_state.json, TRL's printed log dicts, "
                          "verl's file-logger JSONL or console log (`step:N - key:value`), a flat JSONL or a "
                          "W&B CSV export")
    return frame(rows, f"verl log {p.name}", mapping)


# ----------------------------------------------------------------------------------- folders
def checkpoints(folder: Path) -> dict[int, Path]:
    """step -> checkpoint-N folder holding a trainer_state.json."""
    out = {}
    for c in folder.glob("checkpoint-*"):
        tail = c.name.split("-", 1)[1]
        if tail.isdigit() and (c / "trainer_state.json").is_file():
            out[int(tail)] = c
    return dict(sorted(out.items()))


def newest_trainer_state(folder: Path) -> Path | None:
    """The newest state of a TRL output folder: the root's trainer_state.json or the highest
    checkpoint's, whichever has run further (a crash leaves only checkpoints)."""
    found = [(int(json.loads(read_text(s)).get("global_step", -1)), s)
             for s in [folder / "trainer_state.json", *[c / "trainer_state.json" for c in checkpoints(folder).values()]]
             if s.is_file()]
    return max(found, key=lambda t: (t[0], t[1].parent == folder))[1] if found else None


def _load_folder(p: Path, mapping):
    if (p / "metrics.jsonl").exists():
        from rl_lab.utils import read_metrics
        df = frame(read_metrics(p / "metrics.jsonl").to_dict("records"), f"rl_lab run folder {p}", mapping)
        return _tag(df, framework="rl_lab", folder=p)
    state = newest_trainer_state(p)
    if state is not None:
        text = read_text(state)
        whole = _whole_json(text)
        if not isinstance(whole, dict):
            raise ConfigError(f"{state}: not a whole JSON document (a checkpoint being written?)")
        df = _trainer_state_frame(state, whole, mapping)
        if state.parent != p:
            df.attrs["warnings"].append(f"read the newest state, {state.parent.name}/trainer_state.json "
                                        "(no newer trainer_state.json at the folder's root: the run stopped early?)")
        df.attrs["checkpoints"] = list(checkpoints(p))
        return _tag(df, framework="trl", folder=p)
    raise ConfigError(f"{p}: a folder with neither metrics.jsonl (an rl_lab run) nor trainer_state.json "
                      "(a TRL/HF output folder, at its root or in checkpoint-N); pass one of those folders "
                      "or a log file")


def parse_map(items: list[str] | None) -> dict:
    """--map reward=COLUMN (repeatable) -> {"reward": "COLUMN"}."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--map {item!r}: write QUANTITY=COLUMN, e.g. --map reward=train/my_reward")
        key, column = item.split("=", 1)
        out[key.strip()] = column.strip()
    return out


def finite(df, name: str):
    """The column as floats, or None when absent or all NaN."""
    if name not in df.columns:
        return None
    values = df[name].to_numpy(dtype=float)
    return values if np.isfinite(values).any() else None
