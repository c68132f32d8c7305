"""A run's own settings for `rl-lab diagnose`, read without running anything from the run.

* verl: Hydra's saved config.yaml (nested) or a file of `key=value` overrides;
* rl_lab: a run's config.yaml (RLConfig.to_dict);
* TRL: `training_args.bin`, which is a pickle (torch.save of the GRPOConfig).  Loading a pickle runs
  whatever it names, so it is never loaded: `read_pickled_fields` walks its opcodes
  (pickletools.genops, which only parses) and keeps the string keys whose values are plain
  literals.  Anything it cannot read that way is reported as unknown, never guessed.

Every reader returns {"framework", "source", "values": the settings under the framework's own
names (dotted for nested configs), and the few fields `setup_findings` needs}.
"""
from __future__ import annotations

import pickletools
import zipfile
from pathlib import Path

from rl_lab.errors import ConfigError
from rl_lab.tools.diagnose_findings import Finding

_A, _R, _C = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "algorithm.rollout_correction"
TRL_KEYS = ("use_vllm", "vllm_importance_sampling_mode", "vllm_importance_sampling_correction", "num_generations",
            "per_device_train_batch_size", "max_completion_length", "logging_steps")
RL_LAB_KEYS = ("rollout_correction", "policy_loss", "sampler_staleness", "prompts_per_step", "loss_agg_mode")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def read_setup(path) -> dict:
    """Any supported configuration file: TRL's training_args.bin (read safely), rl_lab's
    config.yaml, verl's Hydra config or overrides.  Raises ConfigError naming what was expected."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config {p}: no such file (pass rl_lab's or verl's config.yaml, a verl "
                          "overrides file or TRL's training_args.bin)")
    if p.suffix == ".bin":
        return read_trl_setup(p)
    import yaml
    text = p.read_text(errors="replace")
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        loaded = None
    if isinstance(loaded, dict) and any(k in loaded for k in RL_LAB_KEYS):
        return rl_lab_setup(loaded, str(p))
    if isinstance(loaded, dict) and any(k in loaded for k in TRL_KEYS):
        return trl_setup(loaded, str(p))
    return read_verl_setup(p)


# ----------------------------------------------------------------------------------- verl
def read_verl_setup(path) -> dict:
    """What the diagnosis needs from a verl run's configuration: Hydra's saved `config.yaml`
    (nested), or a file of `key=value` overrides / flat dotted keys.  Missing keys get verl
    0.9.1's defaults where the rules need one.  Raises ConfigError if nothing readable is found."""
    import yaml
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config {p}: no such file (pass verl's Hydra config.yaml or an overrides file)")
    text = p.read_text(errors="replace")
    flat: dict = {}
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        loaded = None
    if isinstance(loaded, dict):
        flat = _flatten(loaded)
    else:                                           # key=value lines (a command line's overrides)
        for word in text.replace("\\\n", " ").split():
            if "=" in word and not word.startswith("-"):
                key, value = word.split("=", 1)
                flat[key.lstrip("+")] = yaml.safe_load(value) if value else None
    if not any(k.startswith(("actor_rollout_ref.", "algorithm.", "data.")) for k in flat):
        raise ConfigError(f"--config {p}: no verl keys (actor_rollout_ref.*, algorithm.*, data.*) found; "
                          "rl_lab's config.yaml and TRL's training_args.bin are read too")

    def get(key, default=None):
        value = flat.get(key, default)
        return default if value is None else value
    batch, mini = get("data.train_batch_size"), get(f"{_A}.ppo_mini_batch_size")
    epochs = get(f"{_A}.ppo_epochs", 1)
    steps = int(batch // mini * epochs) if batch and mini else None
    return {"framework": "verl", "optimizer_steps_per_batch": steps, "train_batch_size": batch,
            "ppo_mini_batch_size": mini, "ppo_epochs": epochs, "lr": get(f"{_A}.optim.lr"),
            "rollout_dtype": get(f"{_R}.dtype", "bfloat16"),
            "temperature": float(get(f"{_R}.temperature", 1.0)), "top_p": float(get(f"{_R}.top_p", 1.0)),
            "top_k": int(get(f"{_R}.top_k", -1)), "rollout_is": get(f"{_C}.rollout_is"),
            "rollout_rs": get(f"{_C}.rollout_rs"), "rollout_rs_threshold": get(f"{_C}.rollout_rs_threshold"),
            "bypass_mode": bool(get(f"{_C}.bypass_mode", False)), "source": str(p), "values": flat}


def setup_findings(setup: dict) -> list:
    """Findings about the configuration itself, each with its evidence (rl_lab.tools.diagnose)."""
    out = []
    k = setup.get("optimizer_steps_per_batch")
    if k and k > 1:
        out.append(Finding(
            "several optimizer steps per batch",
            f"train_batch_size / ppo_mini_batch_size x ppo_epochs = {setup['train_batch_size']} / "
            f"{setup['ppo_mini_batch_size']} x {setup['ppo_epochs']} = {k}: from the second step on, the "
            f"data is up to {k - 1} optimizer step(s) older than the policy",
            "the stability map: a sampler 2-4 steps stale collapsed runs at a learning rate a fresh one "
            "survived, and bypass PPO-clip held (book/ch_when_speed_kills.md)",
            "medium: measured on a 0.3M model on a CPU; the mechanism (stale data) is the same at scale"))
    if setup.get("bypass_mode") and setup.get("rollout_is"):
        out.append(Finding(
            "weights computed, never applied",
            f"bypass_mode=true with rollout_is={setup['rollout_is']!r}",
            "verl 0.9.1: bypass PPO-clip computes the IS weights for its metrics and never applies "
            "them; the clip against the sampler is the correction (book/ch05_rollout_correction.md, "
            "surprise (d))", "high: read from verl's code"))
    tempered = setup.get("temperature", 1.0) != 1.0
    truncated = setup.get("top_p", 1.0) < 1.0 or setup.get("top_k", -1) > 0
    if tempered or truncated:
        out.append(Finding(
            "a tempered or truncated sampler",
            f"temperature={setup['temperature']:g}, top_p={setup['top_p']:g}, top_k={setup['top_k']}",
            "k3 reads low under top-p/top-k by the mass the sampler cuts off (book/ch05, surprise (b)); "
            "a temperature the trainer does not apply to its own log-probs gives ratios far from 1 "
            "from step 1 (check that the actor scores at the same temperature)",
            "high for the estimator's bias; check your trainer for the temperature"))
    rs, th = setup.get("rollout_rs"), setup.get("rollout_rs_threshold")
    if rs and th:
        for option, band in zip(str(rs).split(","), str(th).split(",")):
            if option.strip().endswith("_k1") and "_" in band:
                lo, hi = (float(x) for x in band.split("_"))
                if abs(lo * hi - 1) > 1e-6:
                    out.append(Finding(
                        "a k1 rejection band that is not reciprocal",
                        f"{option.strip()} with threshold {band!r}: verl keeps ratios in "
                        f"[{1 / hi:.3g}, {1 / lo:.3g}], not [{lo:g}, {hi:g}]",
                        "verl 0.9.1's k1 statistic is -log(rho), so its band is mirrored "
                        "(book/ch04_masking_trust_regions.md)", "high: read from verl's code"))
    return out


# ----------------------------------------------------------------------------------- rl_lab
def rl_lab_setup(config: dict, source: str) -> dict:
    """rl_lab's config.yaml (RLConfig.to_dict, nested rollout_correction)."""
    flat = _flatten(config)
    rc = "rollout_correction."
    return {"framework": "rl_lab", "source": source, "values": flat, "lr": flat.get("learning_rate"),
            "temperature": float(flat.get("temperature") or 1.0), "top_p": float(flat.get("top_p") or 1.0),
            "top_k": int(flat.get("top_k") or -1) if flat.get("top_k") else -1,
            "rollout_is": flat.get(rc + "rollout_is"), "rollout_rs": flat.get(rc + "rollout_rs"),
            "rollout_rs_threshold": flat.get(rc + "rollout_rs_threshold"),
            "bypass_mode": bool(flat.get(rc + "bypass_mode", False)),
            "separate_sampler": bool(flat.get("use_vllm")) or bool(flat.get("sampler_staleness"))}


# ----------------------------------------------------------------------------------- TRL
def trl_setup(values: dict, source: str) -> dict:
    """TRL's GRPOConfig fields (from training_args.bin or a YAML of arguments)."""
    use_vllm = values.get("use_vllm")
    return {"framework": "trl", "source": source, "values": values, "lr": values.get("learning_rate"),
            "temperature": float(values.get("temperature") or 1.0), "top_p": float(values.get("top_p") or 1.0),
            "top_k": int(values.get("top_k") or 0) or -1,
            "separate_sampler": None if use_vllm is None else bool(use_vllm)}


def read_trl_setup(path) -> dict:
    p = Path(path)
    values = read_pickled_fields(p)
    if not any(k in values for k in TRL_KEYS + ("learning_rate",)):
        raise ConfigError(f"{p}: no TRL/HF training arguments could be read from it without running it "
                          "(not a torch.save of a TrainingArguments?); the run's settings are unknown")
    return trl_setup(values, f"{p} (read without unpickling)")


_LITERALS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING",
             "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "INT", "FLOAT", "LONG"}


class _Opaque:
    """An object the pickle would build by calling something: never built, only named."""

    def __init__(self, name: str, args=()):
        self.name, self.args = name, args


def read_pickled_fields(path: Path) -> dict:
    """The plain fields (str, int, float, bool, None, and enum-like objects built from one string)
    of the largest string-keyed dict in a pickle (or a torch.save zip's data.pkl), found by walking
    the opcodes: nothing is imported, called or built.  {} when the bytes are not a pickle."""
    data = path.read_bytes()
    if data[:2] == b"PK":
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith("data.pkl")]
            if not names:
                return {}
            data = z.read(names[0])
    try:
        return _walk(data)
    except Exception:                                  # a damaged or unfamiliar pickle: unknown settings
        return {}


def _walk(data: bytes) -> dict:
    """A stack machine over the opcodes that builds only literals, lists, tuples and dicts;
    GLOBAL/REDUCE/NEWOBJ/BUILD/persistent ids become _Opaque placeholders."""
    stack: list = []
    marks: list[int] = []
    memo: dict = {}
    dicts: list[dict] = []
    for op, arg, _pos in pickletools.genops(data):
        name = op.name
        if name in _LITERALS:
            stack.append(arg)
        elif name in ("NEWTRUE", "NEWFALSE"):
            stack.append(name == "NEWTRUE")
        elif name == "NONE":
            stack.append(None)
        elif name == "MARK":
            marks.append(len(stack))
        elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET"):
            stack.append({} if name == "EMPTY_DICT" else [] if name != "EMPTY_TUPLE" else ())
            if name == "EMPTY_DICT":
                dicts.append(stack[-1])
        elif name in ("MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"):
            memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            stack.append(memo[arg])
        elif name in ("SETITEM", "SETITEMS", "APPENDS", "APPEND", "TUPLE", "LIST", "DICT", "FROZENSET",
                      "ADDITEMS"):
            start = len(stack) - 2 if name == "SETITEM" else len(stack) - 1 if name == "APPEND" else marks.pop()
            items, stack = stack[start:], stack[:start]
            if name in ("SETITEM", "SETITEMS", "DICT"):
                target = stack[-1] if name != "DICT" else {}
                for k, v in zip(items[::2], items[1::2]):
                    if isinstance(target, dict) and isinstance(k, str):
                        target[k] = v
                if name == "DICT":
                    stack.append(target)
                    dicts.append(target)
            elif name in ("APPENDS", "APPEND") and isinstance(stack[-1], list):
                stack[-1].extend(items)
            elif name == "TUPLE":
                stack.append(tuple(items))
            elif name == "LIST":
                stack.append(list(items))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items, stack = tuple(stack[-n:]), stack[:-n]
            stack.append(items)
        elif name in ("GLOBAL", "STACK_GLOBAL"):
            if name == "STACK_GLOBAL":
                mod, qual = stack.pop(-2), stack.pop()
                arg = f"{mod} {qual}"
            stack.append(_Opaque(str(arg)))
        elif name in ("REDUCE", "NEWOBJ"):
            args, func = stack.pop(), stack.pop()
            stack.append(_Opaque(getattr(func, "name", "?"), args if isinstance(args, tuple) else ()))
        elif name == "BUILD":
            stack.pop()
        elif name in ("BINPERSID", "PERSID"):
            if name == "BINPERSID":
                stack.pop()
            stack.append(_Opaque("persistent"))
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            stack = stack[:marks.pop()]
        elif name in ("PROTO", "FRAME", "STOP"):
            continue
        else:
            raise ValueError(f"opcode {name} not read")
    best = max(dicts, key=len, default={})
    return {k: _plain(v) for k, v in best.items() if _plain(v) is not _SKIP}


_SKIP = object()


def _plain(v):
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    if (isinstance(v, _Opaque) and len(v.args) == 1 and isinstance(v.args[0], (str, int, float))
            and v.name.split()[-1][:1].isupper()):
        return v.args[0]                               # an enum such as SchedulerType('linear'), not a call
    return _SKIP


def read_run_setup(df) -> dict | None:
    """The settings found beside the run: an rl_lab folder's config.yaml, or a TRL folder's
    training_args.bin (read without unpickling).  None when there is none."""
    folder = df.attrs.get("folder")
    if not folder:
        return None
    folder = Path(folder)
    config = folder / "config.yaml"
    if df.attrs.get("framework") == "rl_lab" and config.is_file():
        import yaml
        try:
            loaded = yaml.safe_load(config.read_text())
        except yaml.YAMLError:
            return None
        return rl_lab_setup(loaded, str(config)) if isinstance(loaded, dict) else None
    if df.attrs.get("framework") == "trl":
        candidates = [folder / "training_args.bin", *sorted(folder.glob("checkpoint-*/training_args.bin"))]
        for c in candidates:
            if c.is_file():
                try:
                    return read_trl_setup(c)
                except ConfigError:
                    return None
    return None
