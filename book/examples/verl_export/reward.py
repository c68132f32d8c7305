"""verl custom reward for the rl_lab task 'addition', written by `rl-lab export verl`.

verl calls compute_score(data_source, solution_str, ground_truth, extra_info) once per response
(reward.custom_reward_function.path/name).  It scores with the task's own reward, so verl and
rl_lab give every completion the same score.  Needs rl_lab importable on every reward worker
(pip install the repository, or put it on PYTHONPATH).
"""
import json
from functools import lru_cache

from rl_lab.tasks import get_task


@lru_cache(maxsize=None)
def _task(name, task_kwargs_json):
    return get_task(name, **json.loads(task_kwargs_json))


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    extra_info = extra_info or {}
    task = _task(data_source, extra_info.get("task_kwargs", '{}'))
    columns = json.loads(extra_info.get("columns") or "{}")
    return task.reward(completions=[solution_str], answer=[ground_truth],
                       **{k: [v] for k, v in columns.items()})[0]
