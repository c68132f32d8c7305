"""Plots of training metrics (matplotlib; static, so they survive in the built book)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

DEFAULT_PANELS = (
    ("reward", "reward (mean over completions)"),
    ("frac_reward_zero_std", "groups with no reward spread"),
    ("entropy", "entropy (nats/token)"),
    ("grad_norm", "gradient norm"),
    ("completions/mean_length", "completion length"),
    ("rollout_corr/k3_kl", "k3 KL(mu || pi) per token"),
)


def smooth(series: pd.Series, window: int | None = None) -> pd.Series:
    """Centred rolling mean; the window defaults to ~5% of the run."""
    window = window or max(1, len(series) // 20)
    return series.rolling(window, min_periods=1, center=True).mean()


def plot_training(df: pd.DataFrame, panels=DEFAULT_PANELS, ncols: int = 3, title: str | None = None):
    """A grid of metric curves (raw in light colour, smoothed on top) against step."""
    panels = [(k, label) for k, label in panels if k in df]
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.8 * nrows), squeeze=False)
    for ax, (key, label) in zip(axes.flat, panels):
        ax.plot(df["step"], df[key], color="C0", alpha=0.25, lw=1)
        ax.plot(df["step"], smooth(df[key]), color="C0", lw=2)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_reward_runs(runs: dict[str, pd.DataFrame], key: str = "reward", ax=None):
    """Smoothed `key` for several runs on one axis (e.g. seeds or settings)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for i, (name, df) in enumerate(runs.items()):
        ax.plot(df["step"], smooth(df[key]), color=f"C{i}", lw=2, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


# --------------------------------------------------------------------------- explorers
# The labs' widget explorers: a function that draws one selection, and one control per keyword
# argument.  `ipywidgets.interact` would do, but it draws into an Output widget by *capturing*
# (`with out: f(...)`), and a notebook runner that stands in for the browser (nbclient's
# OutputWidget, used by `jupyter execute`, jupyter-cache/myst-nb and papermill) answers each
# captured output with a comm message to the kernel on the shell socket, from its IOPub reader,
# while its reply reader waits on that same socket.  jupyter_client's Session.send writes through
# a plain (non-asyncio) shadow of the asyncio socket, so pyzmq never re-checks that socket after
# the send; the send drains libzmq's edge-triggered descriptor, and when the cell's execute_reply
# has already arrived its wake-up is lost.  The runner then waits for a reply it already holds,
# until its cell timeout (for ever without one: `jupyter execute`'s default).  `explorer` draws
# in the kernel instead (IPython's capture_output) and hands the Output widget its finished
# outputs: no capture, so nothing goes from the runner to the kernel, and no wait can be lost.

def _as_widget_output(data: dict, metadata: dict) -> dict:
    """A display_data output for an Output widget's `outputs` (binary payloads as base64)."""
    import base64
    data = {k: base64.b64encode(v).decode("ascii") if isinstance(v, bytes | bytearray) else v
            for k, v in data.items()}
    return {"output_type": "display_data", "data": data, "metadata": metadata or {}}


def _draw(f, kwargs: dict) -> tuple[dict, ...]:
    """Run f(**kwargs) in the kernel and return what it printed and displayed, in nbformat."""
    from IPython.utils.capture import capture_output
    from ipywidgets.widgets.interaction import show_inline_matplotlib_plots

    with capture_output() as cap:
        f(**kwargs)
        show_inline_matplotlib_plots()      # a figure drawn without plt.show()
    outputs = [{"output_type": "stream", "name": name, "text": text}
               for name, text in (("stdout", cap.stdout), ("stderr", cap.stderr)) if text]
    outputs += [_as_widget_output(o.data, o.metadata) for o in cap.outputs]
    return tuple(outputs)


def explorer(f, **controls):
    """Show `controls` (ipywidgets value widgets, one per keyword argument of f) above an output
    area that holds f's drawing for their current values, redrawn whenever one changes: what
    `ipywidgets.interact(f, **controls)` shows, drawn without output capture (see above), so that
    `jupyter execute`, nbval and the book build run a lab's explorer cell like any other cell.

    f draws with matplotlib (`plt.show()`) or prints (the text goes above the drawings); its
    return value is not shown.  The first drawing is made while the cell runs, and an error in it
    fails the cell; a later error (a control moved in JupyterLab) shows its traceback in the
    output area.  Outside IPython, f is called once with the controls' values, and that is all.
    """
    import ipywidgets as widgets
    from IPython import get_ipython
    from IPython.display import display

    for name, control in controls.items():
        if not isinstance(control, widgets.ValueWidget):
            raise TypeError(f"explorer: {name}= must be an ipywidgets value widget (a slider, "
                            f"a dropdown, ...), got {type(control).__name__}")
        if not control.description:
            control.description = name

    def values() -> dict:
        return {name: control.value for name, control in controls.items()}

    if get_ipython() is None:
        f(**values())
        return
    from ipywidgets.widgets.interaction import show_inline_matplotlib_plots
    show_inline_matplotlib_plots()          # the cell's own figures stay in the cell
    out = widgets.Output()
    out.outputs = _draw(f, values())

    def redraw(change):
        try:
            out.outputs = _draw(f, values())
        except Exception as exc:            # shown to the reader, as interact does
            import traceback
            lines = "".join(traceback.format_exception(exc)).splitlines()
            out.outputs = ({"output_type": "error", "ename": type(exc).__name__,
                            "evalue": str(exc), "traceback": lines},)

    for control in controls.values():
        control.observe(redraw, names="value")
    box = widgets.VBox([*controls.values(), out])
    box.add_class("widget-interact")
    display(box)
