"""The labs under a plain notebook runner (issue 33): `jupyter execute`, nbclient.NotebookClient,
jupyter-cache/myst-nb and papermill all execute with nbclient, and nbclient stands in for the
browser's Output widget.

Why the explorers once hung there: `ipywidgets.interact` draws into an Output widget by capturing
(`with out: f(...)`).  For each captured output nbclient's OutputWidget (nbclient/output_widget.py,
`OutputWidget.output` -> `sync_state` -> `_publish_msg`) sends a `comm_msg` to the kernel on the
*shell* socket, from the coroutine that reads IOPub, while `_async_poll_for_reply` (client.py) waits
on that same shell socket in `shell_channel.get_msg` -> `socket.poll(timeout)`.  jupyter_client's
`Session.send` (session.py) writes through `zmq.Socket.shadow(stream.underlying)`, a plain socket,
so pyzmq's asyncio socket never re-checks for readable messages after that send (its own
`_add_send_event` would call `_schedule_remaining_events`).  libzmq's descriptor is
edge-triggered and the send drains it: when the cell's `execute_reply` has arrived just before,
its wake-up is lost, and the runner waits, holding the reply, until the cell timeout (for ever
under `jupyter execute`, whose default is no timeout); then pyzmq's last `poll(0)` finds the reply
and the run goes on.  Measured here (nbclient 0.11.0, jupyter_client 8.10, pyzmq 27.3, ipykernel
7.4): a cell with an Output widget that captured `print(1)` waited out its timeout 2-4 times in 60,
one that captured a 2 MB print 16 times in 20.

`rl_lab.tools.plots.explorer` draws in the kernel (IPython's capture_output) and sets the Output widget's
`outputs` itself: nothing is captured by the runner, so it sends nothing, and no wake-up can be lost.

* `test_explorer_cells_never_wait_out_their_timeout` runs that worst case through `explorer` with
  plain nbclient and a 15 s cell timeout (3 s in all; with `ipywidgets.interact` in place of
  `explorer` it fails: its cells wait out the timeout);
* `test_every_lab_explorer_uses_the_helper`: no lab calls interact/interactive/an Output widget
  itself (static, instant);
* `test_lab_runs_under_plain_nbclient` (slow, opt-in with RL_LAB_NBCLIENT_ALL=1; 13 min for
  the 14 labs in smoke on 2 cores): every lab, one kernel each, as `jupyter execute` runs it.  In CI
  the book build is that run: myst-nb's `force` mode executes each lab with jupyter-cache's
  `single_nb_execution`, a plain `nbclient.execute` (tools/lab_stamp.py records it).
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LABS = sorted((REPO / "labs").glob("*.md"))
PLOTS = REPO / "rl_lab" / "tools" / "plots.py"

CELL_TIMEOUT_S = 15        # an explorer cell takes well under a second; a lost wake-up takes all 15
SETUP_TIMEOUT_S = 300      # the first cell starts the kernel's imports


def new_notebook(sources: list[str]):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def run_with_nbclient(nb, cwd: Path, timeout_func=None, timeout: int = 600) -> list[float]:
    """Execute nb in a fresh python3 kernel with plain nbclient; the seconds each cell took, as the
    client saw them (from sending the cell to holding its reply and outputs)."""
    from nbclient import NotebookClient
    started: dict[int, float] = {}
    took: dict[int, float] = {}

    def on_execute(cell, cell_index, **_):
        started[cell_index] = time.monotonic()

    def on_executed(cell, cell_index, **_):
        took[cell_index] = time.monotonic() - started[cell_index]

    client = NotebookClient(nb, timeout=timeout, timeout_func=timeout_func, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}},
                            on_cell_execute=on_execute, on_cell_executed=on_executed)
    client.execute()
    return [took.get(i, 0.0) for i in range(len(nb.cells))]


def output_widget_states(nb) -> list[list[dict]]:
    """The `outputs` of every Output widget, as the runner stored them for the book."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return [m["state"].get("outputs", []) for m in state.get("state", {}).values()
            if m["model_name"] == "OutputModel"]


# --------------------------------------------------------------------------- (a) the old hang
# rl_lab.tools.plots is loaded from its file, not through `import rl_lab` (torch: ~10 s more per run).
SETUP = f"""\
import importlib.util

import ipywidgets as widgets
import matplotlib.pyplot as plt

_spec = importlib.util.spec_from_file_location("rl_lab_plots", {str(PLOTS)!r})
plots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plots)
"""
# The worst case for the old pattern: a large output in the explorer's area, the last thing the
# cell sends before its reply (the runner is still busy with it when the reply arrives).
BIG = """\
def big(n=2_000_000):
    print("x" * n)


plots.explorer(big, n=widgets.IntSlider(value=2_000_000, min=1, max=2_000_000))
"""
FIGURE = """\
def curve(a=1):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, a])
    plt.show()
    print(f"a = {a}")


a = widgets.IntSlider(value=1, min=1, max=3)
plots.explorer(curve, a=a)
a.value = 2      # what a reader's move does: the area is redrawn in the kernel
"""
BROKEN = """\
def fails(a=1):
    if a == 3:
        raise ValueError("no drawing for a = 3")
    print(f"drawn {a}")


b = widgets.IntSlider(value=1, min=1, max=3)
plots.explorer(fails, a=b)
b.value = 3      # a reader's move that breaks f: the traceback goes to the area, not the cell
"""
N_BIG = 6


def test_explorer_cells_never_wait_out_their_timeout(tmp_path):
    nb = new_notebook([SETUP] + [BIG] * N_BIG + [FIGURE, BROKEN])

    def timeouts(cell):
        return SETUP_TIMEOUT_S if "spec_from_file_location" in cell.source else CELL_TIMEOUT_S

    took = run_with_nbclient(nb, tmp_path, timeout_func=timeouts)
    waited = [(i, round(t, 1)) for i, t in enumerate(took[1:], 1) if t >= 0.8 * CELL_TIMEOUT_S]
    assert not waited, (f"explorer cells waited out their {CELL_TIMEOUT_S} s timeout under plain "
                        f"nbclient (cell, seconds): {waited}; all cells: {[round(t, 1) for t in took]}")

    # Nothing in the cells' own outputs but the explorers' views; the drawings live in the widgets.
    for cell in nb.cells[1:]:
        kinds = [(o.output_type, sorted(o.get("data", {}))) for o in cell.outputs]
        assert kinds == [("display_data", ["application/vnd.jupyter.widget-view+json", "text/plain"])], kinds
    areas = output_widget_states(nb)
    assert len(areas) == N_BIG + 2
    texts = ["".join(o.get("text", "") for o in outs) for outs in areas]
    assert sum(t == "x" * 2_000_000 + "\n" for t in texts) == N_BIG
    # the figure explorer holds the redrawn selection (a = 2) with its figure, for the book
    fig_area = next(outs for outs in areas if any("a = " in o.get("text", "") for o in outs))
    assert [o["text"] for o in fig_area if o["output_type"] == "stream"] == ["a = 2\n"]
    pngs = [o["data"]["image/png"] for o in fig_area if "image/png" in o.get("data", {})]
    assert len(pngs) == 1 and isinstance(pngs[0], str) and len(pngs[0]) > 1000
    broken = next(outs for outs in areas if any(o["output_type"] == "error" for o in outs))
    assert broken[0]["ename"] == "ValueError" and "no drawing for a = 3" in broken[0]["evalue"]


def test_explorer_outside_ipython_calls_f_once():
    import ipywidgets as widgets

    from rl_lab.tools.plots import explorer
    calls = []
    explorer(lambda a, b: calls.append((a, b)), a=widgets.IntSlider(value=3),
             b=widgets.Dropdown(options=["x", "y"], value="y"))
    assert calls == [(3, "y")]
    with pytest.raises(TypeError, match="value widget"):
        explorer(lambda a: None, a=(1, 5))


# --------------------------------------------------------------------------- (b) static check
def code_cells(text: str) -> list[str]:
    return re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, re.S | re.M)


CAPTURING = re.compile(r"\binteract(?:ive|_manual|ive_output)?\s*\(|\bOutput\s*\(|\.capture\s*\(")


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_every_lab_explorer_uses_the_helper(path):
    code = "\n".join(code_cells(path.read_text(encoding="utf-8")))
    bad = sorted({m.group(0) for m in CAPTURING.finditer(code)})
    assert not bad, (f"{path.name} draws into an Output widget itself ({bad}): under `jupyter "
                     f"execute`/nbval that can wait out the cell timeout (tests/integration/test_nbclient_labs.py); "
                     f"use rl_lab.tools.plots.explorer(f, name=widget, ...)")
    if "import ipywidgets" in code:
        assert "explorer(" in code, f"{path.name} imports ipywidgets but has no explorer(...)"


# --------------------------------------------------------------------------- (c) every lab
def executed_by_book(lab: Path) -> bool:
    """Whether `make book` executed this lab (with nbclient) from these exact files."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("lab_stamp", REPO / "tools" / "lab_stamp.py")
    stamp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stamp)
    return str(lab.relative_to(REPO)) not in stamp.stale_labs(REPO, {**os.environ, "RL_LAB_NBVAL_ALL": "0"})


@pytest.mark.slow
@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_lab_runs_under_plain_nbclient(path):
    if os.environ.get("RL_LAB_NBCLIENT_ALL", "0") in ("", "0"):
        if executed_by_book(path):
            pytest.skip("`make book` executed this lab with nbclient from these exact files")
        pytest.skip("opt-in: RL_LAB_NBCLIENT_ALL=1 runs every lab under plain nbclient")
    import jupytext
    nb = jupytext.read(path)
    t0 = time.monotonic()
    took = run_with_nbclient(nb, path.parent, timeout=600)
    print(f"{path.stem}: {time.monotonic() - t0:.0f} s under plain nbclient, slowest cell "
          f"{max(took):.0f} s")
