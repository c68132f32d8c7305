"""Synthetic tasks with exact, verifiable rewards.

Each task generates seeded prompts with a difficulty knob and scores completions with a
reward function in TRL's signature: ``reward(prompts, completions, answer, **kwargs) ->
list[float]`` (extra dataset columns arrive as keyword arguments).

Chapter 1 and lab 1 use them.  `MultiplicationTool` is a tool task: its `environment` (a
calculator behind text delimiters) makes every completion a multi-turn episode.
"""
from __future__ import annotations

import ast
import dataclasses
import operator
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from rl_lab.agents.episodes import ToolEnvironment
from rl_lab.agents.registry import run_tool
from rl_lab.agents.result import ToolResult


@dataclass
class Task:
    """Base class: subclasses define `sample(rng)`, `score(completion, example)`, `answer_tokens(knobs)`
    and, for knobs with a range, `check_knobs(knobs)`."""
    name = "task"
    reward_mode: str = "exact"

    def sample(self, rng: np.random.Generator) -> dict:
        raise NotImplementedError

    def score(self, completion: str, example: dict) -> float:
        """Default: exact match of the stripped completion with the answer ("exact"), or the
        fraction of aligned characters that agree ("partial")."""
        pred = completion.strip()
        if self.reward_mode == "partial":
            return _digit_match(pred, example["answer"])
        return float(pred == example["answer"])

    def __post_init__(self):
        self.check_knobs(self)

    @classmethod
    def check_knobs(cls, knobs) -> None:
        """Raise ValueError for a knob out of range.  `knobs` is a task or a namespace of its
        fields (`check_task`): the config checks a task's knobs without building the task."""

    @classmethod
    def answer_tokens(cls, knobs) -> int:
        """Tokens in the longest answer (a tool task: the longest episode) for these knobs."""
        raise NotImplementedError

    @property
    def max_answer_length(self) -> int:
        return self.answer_tokens(self)

    def make_dataset(self, n: int, seed: int = 0) -> list[dict]:
        """n examples {"prompt", "answer", ...}, the same for the same seed."""
        rng = np.random.default_rng(seed)
        return [self.sample(rng) for _ in range(n)]

    def target(self, example: dict) -> str:
        """The completion supervised warm-start trains on."""
        return example["answer"]

    def reward(self, prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
        """TRL-style reward function: one float per completion."""
        if completions is None or answer is None:
            raise TypeError(f"{self.name}.reward needs completions= and answer=")
        columns = {"answer": answer, **{k: v for k, v in kwargs.items() if isinstance(v, list)}}
        out = []
        for i, completion in enumerate(completions):
            example = {k: v[i] for k, v in columns.items() if len(v) == len(completions)}
            out.append(float(self.score(completion, example)))
        return out

    def token_rewards(self, completion: str, example: dict) -> list[float]:
        """Per-token rewards r_t: one per character of the stripped completion (the tokenizer
        is character-level) and one for the closing <eos>.

        "exact": terminal only -- zeros, then the exact-match score on <eos>.
        "partial": dense ternary rewards in {-1, 0, +1} per character (`digit_token_rewards`).
        The sequence reward the trainer uses stays `score` (a scalar per completion).
        """
        pred = completion.strip()
        if self.reward_mode == "partial":
            return digit_token_rewards(pred, example["answer"])
        return [0.0] * len(pred) + [float(self.score(completion, example))]

    def token_return(self, prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
        """TRL-style reward function: the return G = sum_t r_t of `token_rewards`, one float
        per completion (with "partial": #right - #wrong characters, - 1 if the length is off)."""
        if completions is None or answer is None:
            raise TypeError(f"{self.name}.token_return needs completions= and answer=")
        columns = {"answer": answer, **{k: v for k, v in kwargs.items() if isinstance(v, list)}}
        return [float(sum(self.token_rewards(c, {k: v[i] for k, v in columns.items()
                                                 if len(v) == len(completions)})))
                for i, c in enumerate(completions)]

    def __call__(self, *args, **kwargs):
        return self.reward(*args, **kwargs)

    @property
    def __name__(self):  # TRL logs rewards/<func.__name__>
        return self.name


def _require(kind: type, knobs, name: str, lo: int, hi: int, reward_modes=None):
    """A task's range check: knob `name` in [lo, hi] and, given `reward_modes`, one of them."""
    value = getattr(knobs, name)
    if not lo <= value <= hi:
        raise ValueError(f"{kind.__name__}.{name}={value!r} must be in [{lo}, {hi}]")
    if reward_modes is not None and knobs.reward_mode not in reward_modes:
        raise ValueError(f"{kind.__name__}.reward_mode={knobs.reward_mode!r}: choose one of {list(reward_modes)}")


def digit_token_rewards(pred: str, target: str) -> list[float]:
    """Dense ternary per-token rewards for a character-level answer, length len(pred) + 1:
    character t earns +1 if it equals target[t] and -1 otherwise (wrong, or past the end of
    the target); the closing <eos> earns 0 if the answer has the target's length, else -1
    (stopped early or ran long).  The exact answer earns +1 per character and 0 at <eos>."""
    chars = [1.0 if t < len(target) and c == target[t] else -1.0 for t, c in enumerate(pred)]
    return chars + [0.0 if len(pred) == len(target) else -1.0]


def _digit_match(pred: str, target: str) -> float:
    """Fraction of aligned positions that agree, over the longer string (0 for empty)."""
    if not pred and not target:
        return 1.0
    hits = sum(a == b for a, b in zip(pred, target))
    return hits / max(len(pred), len(target))


def sample_sum(rng: np.random.Generator, digits: int) -> dict:
    """Two operands of exactly `digits` digits (0-9 for one digit): {"prompt": "a+b=", "answer": "a+b"}."""
    lo, hi = 10 ** (digits - 1) if digits > 1 else 0, 10 ** digits
    a, b = int(rng.integers(lo, hi)), int(rng.integers(lo, hi))
    return {"prompt": f"{a}+{b}=", "answer": str(a + b)}


@dataclass
class Addition(Task):
    """"37+45=" -> "82".  Knob: `digits` per operand."""
    digits: int = 2
    name = "addition"

    @classmethod
    def check_knobs(cls, k):
        _require(cls, k, "digits", 1, 6, reward_modes=("exact", "partial"))

    def sample(self, rng):
        return sample_sum(rng, self.digits)

    @classmethod
    def answer_tokens(cls, k):
        return k.digits + 1

    def all_examples(self) -> list[dict]:
        """Every prompt of this task, in order (for exact averages over the task; digits <= 3)."""
        if self.digits > 3:
            raise ValueError(f"Addition.all_examples: digits={self.digits} has too many prompts; use <= 3")
        lo, hi = 10 ** (self.digits - 1) if self.digits > 1 else 0, 10 ** self.digits
        return [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(lo, hi) for b in range(lo, hi)]


@dataclass
class DigitStringTask(Task):
    """A string of `length` random digits, answered by `transform(digits)`."""
    length: int = 5
    name = "digits"
    keyword = "digits"

    @classmethod
    def check_knobs(cls, k):
        _require(cls, k, "length", 1, 20, reward_modes=("exact", "partial"))

    def transform(self, digits: str) -> str:
        raise NotImplementedError

    def sample(self, rng):
        s = "".join(str(d) for d in rng.integers(0, 10, self.length))
        return {"prompt": f"{self.keyword}:{s}=", "answer": self.transform(s)}

    @classmethod
    def answer_tokens(cls, k):
        return k.length


@dataclass
class Reversal(DigitStringTask):
    """"rev:30417=" -> "71403".  Knob: `length` of the digit string."""
    name = "reversal"
    keyword = "rev"

    def transform(self, digits):
        return digits[::-1]


@dataclass
class Sorting(DigitStringTask):
    """"sort:30417=" -> "01347".  Knob: `length`."""
    name = "sorting"
    keyword = "sort"

    def transform(self, digits):
        return "".join(sorted(digits))


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def safe_eval(expr: str) -> tuple[int, list[int]]:
    """Evaluate an integer expression with + - * and parentheses; return (value, numbers
    used).  Raises ValueError for anything else."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an expression: {expr!r}") from e
    numbers: list[int] = []

    def ev(node):
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Constant) and type(node.value) is int:
            numbers.append(node.value)
            return node.value
        raise ValueError(f"unsupported element in {expr!r}")

    return ev(tree.body), numbers


@dataclass
class Countdown(Task):
    """"cd:3,5,7>22=" -> an expression using each number once, e.g. "3*5+7".
    Any correct expression earns the reward.  Knobs: `n_numbers`, `max_number`."""
    n_numbers: int = 3
    max_number: int = 9
    name = "countdown"

    @classmethod
    def check_knobs(cls, k):
        _require(cls, k, "n_numbers", 2, 5)
        _require(cls, k, "max_number", 2, 99)

    def sample(self, rng):
        nums = [int(x) for x in rng.integers(1, self.max_number + 1, self.n_numbers)]
        ops = rng.choice(["+", "-", "*"], self.n_numbers - 1)
        expr = str(nums[0]) + "".join(f"{o}{n}" for o, n in zip(ops, nums[1:]))
        target, _ = safe_eval(expr)
        shown = sorted(nums)
        return {"prompt": f"cd:{','.join(map(str, shown))}>{target}=", "answer": expr,
                "numbers": shown, "target": target}

    @classmethod
    def answer_tokens(cls, k):
        return k.n_numbers * (len(str(k.max_number)) + 1) - 1

    def score(self, completion, example):
        try:
            value, used = safe_eval(completion.strip())
        except (ValueError, RecursionError):
            return 0.0
        numbers = example.get("numbers")
        target = example.get("target")
        if numbers is None or target is None:  # recover both from the answer
            target, numbers = safe_eval(example["answer"])
        return float(value == target and Counter(used) == Counter(numbers))


@dataclass
class ScratchpadAddition(Task):
    """"4837+2956=" -> "7+6=13,3+5+1=9,8+9=17,4+2+1=7>7793": column addition written out,
    least significant column first, one "x+y[+1]=s" step per column (the "+1" is the carry in),
    then ">" and the sum.  Knob: `digits` per operand (both operands have exactly `digits`
    digits).  At the default 5 digits a completion is 35-49 characters, about 42 on average:
    tokens, since the tokenizer is character-level.  The reward reads only the final answer,
    after the last ">": a wrong scratchpad with the right sum still earns 1.

    The long-completion task of research/long_completions/ (issue 15): the sequence-level
    sampler/trainer ratio is a product over ~10x more tokens than `Addition`'s."""
    digits: int = 5
    name = "scratchpad"

    @classmethod
    def check_knobs(cls, k):
        _require(cls, k, "digits", 1, 10, reward_modes=("exact",))

    def sample(self, rng):
        return sample_sum(rng, self.digits)

    @staticmethod
    def scratchpad(a: int, b: int) -> str:
        """The written column addition of a + b (non-negative), ending in ">" and the sum."""
        xs, ys = str(a)[::-1], str(b)[::-1]
        steps, carry = [], 0
        for i in range(max(len(xs), len(ys))):
            x, y = int(xs[i]) if i < len(xs) else 0, int(ys[i]) if i < len(ys) else 0
            s = x + y + carry
            steps.append(f"{x}+{y}" + ("+1" if carry else "") + f"={s}")
            carry = s // 10
        return ",".join(steps) + f">{a + b}"

    def target(self, example):
        a, b = example["prompt"].rstrip("=").split("+")
        return self.scratchpad(int(a), int(b))

    @classmethod
    def answer_tokens(cls, k):
        # first column "x+y=ss" (6), later ones "x+y+1=ss" (8), commas, ">" and digits+1 digits
        return 6 + 8 * (k.digits - 1) + (k.digits - 1) + 1 + k.digits + 1

    def score(self, completion, example):
        text = completion.strip()
        if ">" not in text:
            return 0.0
        return float(text.rsplit(">", 1)[1].strip() == example["answer"])

    def token_rewards(self, completion, example):
        return [0.0] * len(completion.strip()) + [float(self.score(completion, example))]


TOOL_OUTPUT_STYLES = ("plain", "ood")


@dataclass(frozen=True)
class GroupedNumberEnvironment(ToolEnvironment):
    """A `ToolEnvironment` whose observations write integers with thousands separators
    ("9716" -> "9,716"); any other output (an error message, a float) is left as it is.  The
    out-of-distribution tool output of `MultiplicationTool(tool_output_style="ood")`."""

    def observation(self, result: ToolResult) -> str:
        return super().observation(dataclasses.replace(result, output=group_thousands(result.output)))


def group_thousands(text: str) -> str:
    """"9716" -> "9,716", "-1234567" -> "-1,234,567"; text that is not an integer is unchanged."""
    body = text[1:] if text.startswith("-") else text
    if not body.isdigit():
        return text
    return f"{int(text):,}"


@dataclass
class MultiplicationTool(Task):
    """A tool task: "347*28=" -> the episode "(347*28)=9716|9716".

    The model writes a calculator call between "(" and ")", the environment appends the tool's
    output between "=" and "|" (environment tokens: not sampled, not trained on), and the model
    copies the product as its answer.  The character tokenizer has no "<", hence these
    delimiters.  A 0.3M model cannot multiply a 3-digit by a 2-digit number on its own (without
    the tool its success is near 0); with the tool the task is two copies.

    The environment allows K = 2 model turns (a call, then the answer); `RLConfig.max_turns`
    changes K for a run (1: the call is not executed, so the model must write the product itself).

    Knobs: `digits_a`, `digits_b` (operand lengths); `tool_output_style` "plain" ("=9716|") or "ood" ("=9,716|": thousands separators the warm
    start never saw, SimpleTIR's out-of-distribution tool output); `call_reward`, a reward for a
    first turn that is a well-formed call (one the calculator accepts), added to the answer's;
    `tool_failure_rate` p, a flaky calculator: each call fails with probability p whatever it asks
    (a hash of row, turn and call: `ToolEnvironment.fails`), the environment writes "=error|" and
    the episode ends there with reward 0.  The environment, not the policy, then decides how many
    of a group's episodes reach the answer turn: the setting where per-turn baselines differ from
    trajectory-level ones (research/trloo_turns).

    `score` reads only the answer, the text after the last "|" (or the whole completion when it
    has no "|"): a product written without the tool counts too.  `turn_rewards` splits the
    reward by model turn: [call reward, answer reward] for an episode with a call, [answer
    reward] without one."""
    digits_a: int = 3
    digits_b: int = 2
    tool_output_style: str = "plain"
    call_reward: float = 0.0
    tool_failure_rate: float = 0.0
    name = "multiplication_tool"

    @classmethod
    def check_knobs(cls, k):
        for knob in ("digits_a", "digits_b"):
            value = getattr(k, knob)
            if not isinstance(value, int) or not 1 <= value <= 6:
                raise ValueError(f"MultiplicationTool.{knob}={value!r} must be an integer in [1, 6]")
        if k.tool_output_style not in TOOL_OUTPUT_STYLES:
            raise ValueError(f"MultiplicationTool.tool_output_style={k.tool_output_style!r}: choose one of "
                             f"{list(TOOL_OUTPUT_STYLES)}")
        if not 0 <= k.call_reward <= 1:
            raise ValueError(f"MultiplicationTool.call_reward={k.call_reward!r} must be in [0, 1]")
        rate = k.tool_failure_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            raise ValueError(f"MultiplicationTool.tool_failure_rate={rate!r} must be a number in [0, 1): the share "
                             "of calculator calls that fail and end the episode (0: a reliable calculator)")
        if k.reward_mode != "exact":
            raise ValueError(f"reward_mode={k.reward_mode!r}: MultiplicationTool supports only 'exact'")

    @property
    def environment(self) -> ToolEnvironment:
        """The calculator behind "(" ")" for the call and "=" "|" for its output, K = 2 turns; a
        final answer is a number (digits, perhaps with separators); a share `tool_failure_rate` of
        the calls fail and end the episode."""
        kind = GroupedNumberEnvironment if self.tool_output_style == "ood" else ToolEnvironment
        return kind(tool="calculator", max_turns=2, call_open="(", call_close=")",
                    output_open="=", output_close="|", answer_pattern=r"-?[\d,]+",
                    failure_rate=self.tool_failure_rate)

    def sample(self, rng):
        a = int(rng.integers(10 ** (self.digits_a - 1) if self.digits_a > 1 else 0, 10 ** self.digits_a))
        b = int(rng.integers(10 ** (self.digits_b - 1) if self.digits_b > 1 else 0, 10 ** self.digits_b))
        return {"prompt": f"{a}*{b}=", "answer": str(a * b)}

    def model_turns(self, example: dict) -> list[str]:
        """What the model writes in each turn of the demonstration: the call, then the answer."""
        env = self.environment
        return [f"{env.call_open}{example['prompt'].rstrip('=')}{env.call_close}", example["answer"]]

    def trace_segments(self, example: dict) -> list[tuple[str, bool]]:
        """The demonstration as (text, is_environment) pieces: each model turn, and after every
        call but the last turn's the real tool's output as the environment formats it."""
        env, turns = self.environment, self.model_turns(example)
        segments = []
        for k, turn in enumerate(turns):
            segments.append((turn, False))
            call = env.parse_call(turn) if k < len(turns) - 1 and k < env.max_turns - 1 else None
            if call is not None:
                segments.append((env.observation(run_tool(env.tool, call)), True))
        return segments

    def target(self, example):
        return "".join(text for text, _ in self.trace_segments(example))

    @classmethod
    def answer_tokens(cls, k):
        """Tokens in the longest episode: call, tool output (with separators), answer."""
        product = k.digits_a + k.digits_b
        call = 1 + k.digits_a + 1 + k.digits_b + 1
        output = 1 + product + ((product - 1) // 3 if k.tool_output_style == "ood" else 0) + 1
        return call + output + product

    def split_episode(self, completion: str) -> tuple[str | None, str]:
        """(the first turn's call or None, the answer text).  The call is the text between the
        first "(" and the first ")" when the completion starts with it; the answer is what
        follows the last "|" (all of the completion when there is none)."""
        env, text = self.environment, completion.strip()
        call = None
        if text.startswith(env.call_open) and env.call_close in text:
            call = text[len(env.call_open): text.index(env.call_close)]
        answer = text.rsplit(env.output_close, 1)[1] if env.output_close in text else text
        return call, answer.strip()

    def answer_correct(self, completion: str, example: dict) -> bool:
        return self.split_episode(completion)[1] == example["answer"]

    def well_formed_call(self, completion: str) -> bool:
        """The first turn is a call the calculator accepts."""
        call, _ = self.split_episode(completion)
        return call is not None and run_tool("calculator", call).ok

    def turn_rewards(self, completion: str, example: dict) -> list[float]:
        """Per model turn: [call_reward if the call is well formed, 1 if the answer is right]
        for an episode that starts with a call; [1 if the answer is right] otherwise."""
        answer = float(self.answer_correct(completion, example))
        if self.split_episode(completion)[0] is None:
            return [answer]
        return [self.call_reward * self.well_formed_call(completion), answer]

    def score(self, completion, example):
        return float(sum(self.turn_rewards(completion, example)))

    def token_rewards(self, completion, example):
        return [0.0] * len(completion.strip()) + [float(self.score(completion, example))]


def turn_reward_metrics(task: Task, completions: list[str], columns: dict[str, list],
                        max_turns: int = 1) -> dict[str, float]:
    """{"rewards/turn_<k>/mean": mean reward of model turn k over the episodes that reached it}
    for a task with `turn_rewards` (per-turn rewards), for k < max(max_turns, turns seen); NaN for
    a turn no episode reached (every step logs the same keys).  {} for any other task."""
    if not hasattr(task, "turn_rewards"):
        return {}
    sums, counts = [0.0] * max_turns, [0] * max_turns
    for i, completion in enumerate(completions):
        example = {k: v[i] for k, v in columns.items()}
        for k, r in enumerate(task.turn_rewards(completion, example)):
            if k >= len(sums):
                sums.append(0.0)
                counts.append(0)
            sums[k] += float(r)
            counts[k] += 1
    return {f"rewards/turn_{k}/mean": sums[k] / counts[k] if counts[k] else float("nan")
            for k in range(len(sums))}


TASKS: dict[str, type[Task]] = {"addition": Addition, "reversal": Reversal,
                                "sorting": Sorting, "countdown": Countdown,
                                "scratchpad": ScratchpadAddition,
                                "multiplication_tool": MultiplicationTool}


def check_task(name: str, knobs: dict) -> SimpleNamespace:
    """A task's knobs with its defaults filled in, checked as building the task checks them,
    without building it: what `RLConfig` validates (the class's `answer_tokens` reads the result).
    Raises ValueError, saying what to change, for an unknown task, knob or value."""
    if name not in TASKS:
        raise ValueError(f"task {name!r} is unknown; choose one of {list(TASKS)}")
    kind = TASKS[name]
    fields = {f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default
              for f in dataclasses.fields(kind)}
    unknown = sorted(set(knobs) - set(fields))
    if unknown:
        raise ValueError(f"task {name!r} accepts {list(fields)}; {unknown} is not one of them")
    checked = SimpleNamespace(**{**fields, **knobs})
    try:
        kind.check_knobs(checked)
    except TypeError as e:        # e.g. digits="2" compared with an int
        raise ValueError(f"task {name!r}: bad value in {knobs!r} ({e})") from e
    return checked


def is_tool_task(name: str) -> bool:
    """Whether the task's episodes are multi-turn (it has a tool `environment`)."""
    return hasattr(TASKS[name], "environment")


def get_task(name: str, **kwargs) -> Task:
    """Build a task by name with its difficulty knobs, e.g. get_task("addition", digits=3)."""
    knobs = check_task(name, kwargs)
    return TASKS[name](**vars(knobs))
