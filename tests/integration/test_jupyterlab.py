"""The labs in JupyterLab, in a real browser (headless Chromium driven over the DevTools protocol).

`test_lab1_runs_in_jupyterlab` (slow, ~1-2 min) does what a reader does after `make lab`:

1. starts JupyterLab the way `make lab` does (same settings dir, `tools/jupyterlab/settings`, and
   the repository's `jupytext.toml`) on a free localhost port, with a token and temporary config,
   runtime, data, settings and workspace dirs, serving a *temporary copy* of the lab (JupyterLab
   autosaves; the repository is never written), with RL_LAB_PRESET=smoke in the kernel's env;
2. opens `/lab/tree/labs/lab01_first_rl_run.md` and checks that it opens as a notebook (jupytext's
   "Jupytext Notebook" viewer is the default for .md), not as text;
3. runs all cells (the `notebook:run-all-cells` command), waits until every code cell has run and
   the kernel is idle, and checks that no cell has an error output and no stderr output holds a
   traceback, and that the first cell with an `assert` shows its output (`preset 'smoke'`);
4. moves the smoothing-window slider of the lab's ipywidgets explorer with the keyboard (focus on
   the slider handle, `End`), and checks that the readout and the re-drawn figure change.

Screenshots are written to $RL_LAB_TEST_ARTIFACTS (default `_build/test-artifacts/`):
`jupyterlab_lab01_run.png` after the run, `jupyterlab_lab01_widget.png` after the slider moved,
`jupyterlab_lab01_failure.png` and `jupyterlab_server.log` when the test fails.
The server and the browser are stopped, with every process they started, even when it fails
(the test checks that none is left).

Skips (with the reason) when no Chromium is found, except with RL_LAB_REQUIRE_BOOK=1 (CI), where it
fails. Chromium: $CHROMIUM, else chromium, chromium-browser, google-chrome(-stable) on PATH (the
`chromium` fixture in tests/conftest.py).
The other tests here are fast static checks of the `make lab` setup.
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB = "labs/lab01_first_rl_run.md"
SETTINGS_DIR = REPO / "tools" / "jupyterlab" / "settings"
JUPYTEXT_TOML = REPO / "jupytext.toml"
REQUIRE = os.environ.get("RL_LAB_REQUIRE_BOOK", "") == "1"
ARTIFACTS = Path(os.environ.get("RL_LAB_TEST_ARTIFACTS") or REPO / "_build" / "test-artifacts")
# Generous: a loaded 2-core CI runner takes ~45 s for lab 1 in the smoke preset.
TIMEOUT_START_S = 60
TIMEOUT_OPEN_S = 90
TIMEOUT_RUN_S = 300
TIMEOUT_WIDGET_S = 60
# Settings only for the test: no autosave, no news or update checks (the browser is offline).
TEST_ONLY_OVERRIDES = {
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"{reason} (RL_LAB_REQUIRE_BOOK=1 makes this a failure)")
    pytest.skip(reason)


# --------------------------------------------------------------------------- the lab's source
@dataclass(frozen=True)
class LabCells:
    """Indices (in the notebook JupyterLab shows) of the cells the test looks at."""

    n_code: int
    first_assert: int
    slider: int


def find_lab_cells(path: Path) -> LabCells:
    """Read the lab with jupytext (as JupyterLab's contents manager does) and find the first code
    cell with an `assert` statement and the code cell that builds an IntSlider explorer."""
    import jupytext

    cells = jupytext.read(path).cells
    code = [i for i, c in enumerate(cells) if c.cell_type == "code"]
    asserts = [i for i in code if any(line.lstrip().startswith("assert ") for line in cells[i].source.splitlines())]
    sliders = [i for i in code if "IntSlider(" in cells[i].source]
    if not asserts or not sliders:
        raise AssertionError(f"{path}: the test needs a code cell with an assert and one with an IntSlider "
                             f"explorer (found {len(asserts)} and {len(sliders)}); update tests/integration/test_jupyterlab.py")
    return LabCells(n_code=len(code), first_assert=asserts[0], slider=sliders[0])


# --------------------------------------------------------------------------- processes
def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def stop_process_tree(proc: subprocess.Popen, children: list, grace_s: float = 10.0) -> list[str]:
    """SIGTERM `proc`'s process group and `children` (psutil processes recorded earlier, e.g.
    kernels in their own session), SIGKILL what is left after `grace_s`; return what survived."""
    import psutil

    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        _, alive = psutil.wait_procs(children, timeout=grace_s if sig == signal.SIGTERM else 5)
        if proc.poll() is not None and not alive:
            return []
    return [f"pid {p.pid} ({p.name()})" for p in alive if p.is_running()] + (
        [f"pid {proc.pid}"] if proc.poll() is None else [])


# --------------------------------------------------------------------------- JupyterLab server
@dataclass
class LabServer:
    url: str
    token: str
    root: Path
    log: Path
    proc: subprocess.Popen

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else "(no log)"

    def api(self, path: str, method: str = "GET") -> dict | list | None:
        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None


def server_command(root: Path, settings_dir: Path, token: str) -> list[str]:
    """`jupyter lab` as `make lab` starts it (localhost, token, the repository's settings), on an
    OS-assigned port, with the app object exposed to the page (`window.jupyterapp`) for the test."""
    return [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        f"--LabApp.app_settings_dir={settings_dir}", "--LabApp.expose_app_in_browser=True",
        # Safety nets should the test process itself be killed: idle kernels, then the server, go.
        "--MappingKernelManager.cull_idle_timeout=600", "--MappingKernelManager.cull_interval=60",
        "--ServerApp.shutdown_no_activity_timeout=600",
    ] + (["--allow-root"] if os.geteuid() == 0 else [])  # CI containers run as root


def server_env(tmp: Path) -> dict[str, str]:
    """The test's environment with every Jupyter user dir moved into `tmp` and the smoke preset."""
    env = dict(os.environ)
    for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                     ("JUPYTER_DATA_DIR", "data"), ("JUPYTERLAB_SETTINGS_DIR", "user-settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")]:
        (tmp / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(tmp / sub)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(RL_LAB_PRESET="smoke", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    env.pop("MPLBACKEND", None)  # the kernel's inline backend draws the figures
    env.pop("JUPYTER_CONFIG_PATH", None)
    return env


def _read_server_info(runtime: Path, pid: int) -> dict | None:
    info = runtime / f"jpserver-{pid}.json"
    if not info.exists():
        return None
    try:
        return json.loads(info.read_text())
    except json.JSONDecodeError:  # being written
        return None


@contextlib.contextmanager
def jupyterlab_server(tmp: Path) -> Iterator[LabServer]:
    """JupyterLab on a temporary copy of the lab (plus jupytext.toml), stopped with its kernels."""
    root = tmp / "root"
    (root / "labs").mkdir(parents=True)
    shutil.copy2(REPO / LAB, root / LAB)
    shutil.copy2(JUPYTEXT_TOML, root / "jupytext.toml")
    settings = tmp / "app-settings"
    settings.mkdir()
    shutil.copy2(SETTINGS_DIR / "overrides.json", settings / "overrides.json")
    (settings / "overrides.d").mkdir()  # lower priority than overrides.json
    (settings / "overrides.d" / "test.json").write_text(json.dumps(TEST_ONLY_OVERRIDES))
    env = server_env(tmp)
    token = base64.b32encode(os.urandom(20)).decode().lower()
    log = tmp / "server.log"
    with open(log, "wb") as log_f:
        proc = subprocess.Popen(server_command(root, settings, token), cwd=root, env=env,
                                stdout=log_f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    server = LabServer(url="", token=token, root=root, log=log, proc=proc)
    children: list = []
    try:
        deadline = time.monotonic() + TIMEOUT_START_S
        while (info := _read_server_info(Path(env["JUPYTER_RUNTIME_DIR"]), proc.pid)) is None:
            if proc.poll() is not None:
                raise AssertionError(f"JupyterLab exited with {proc.returncode} at start:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"JupyterLab did not start within {TIMEOUT_START_S} s:\n{server.log_tail()}")
            time.sleep(0.2)
        server.url = f"http://127.0.0.1:{info['port']}"
        server.api("/api/status")
        yield server
    finally:
        children = _descendants(proc.pid)  # kernels run in their own session: record them now
        if proc.poll() is None and server.url:
            with contextlib.suppress(OSError):
                server.api("/api/shutdown", method="POST")  # shuts the kernels down too
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
        left = stop_process_tree(proc, children)
        if left:
            raise AssertionError(f"processes left after stopping JupyterLab: {left}")


# --------------------------------------------------------------------------- Chromium over CDP
class DevTools:
    """A minimal Chrome DevTools Protocol client on one page target (websocket-client)."""

    def __init__(self, ws_url: str):
        import websocket

        self._ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True,
                                               enable_multithread=False)
        self._next_id = 0
        self.exceptions: list[str] = []  # uncaught page errors, for failure messages

    def send(self, method: str, **params) -> dict:
        self._next_id += 1
        msg_id = self._next_id
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("method") == "Runtime.exceptionThrown":
                details = msg["params"]["exceptionDetails"]
                self.exceptions.append(details.get("exception", {}).get("description") or details.get("text", ""))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise AssertionError(f"DevTools {method} failed: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str):
        """Value of a JS expression (promises awaited); a thrown JS error becomes an AssertionError."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            d = result["exceptionDetails"]
            raise AssertionError(f"JS error: {d.get('exception', {}).get('description') or d.get('text')}\n"
                                 f"in: {expression[:300]}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def key(self, key: str, code: int) -> None:
        """Press and release one key on the focused element (a real keyboard event)."""
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, code=key,
                      windowsVirtualKeyCode=code, nativeVirtualKeyCode=code)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()


@contextlib.contextmanager
def chromium_page(exe: str, tmp: Path) -> Iterator[DevTools]:
    """Headless Chromium (offline: only 127.0.0.1 resolves) with a DevTools session on its page."""
    profile = tmp / "chromium-profile"
    profile.mkdir()
    args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-extensions", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--no-default-browser-check", "--mute-audio",
            f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0", "--window-size=1400,1000",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", "about:blank"]
    log = tmp / "chromium.log"
    with open(log, "wb") as log_f:
        proc = subprocess.Popen(args, stdout=log_f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    page = None
    children: list = []
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT_START_S
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"Chromium did not open its DevTools port (rc={proc.poll()}):\n"
                                     f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = [t for t in json.loads(r.read()) if t.get("type") == "page"]
        assert targets, "Chromium has no page target"
        page = DevTools(targets[0]["webSocketDebuggerUrl"])
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send("Emulation.setFocusEmulationEnabled", enabled=True)  # focus and keys as in a window
        yield page
    finally:
        if page is not None:
            page.close()
        children = _descendants(proc.pid)
        left = stop_process_tree(proc, children, grace_s=5)
        if left:
            raise AssertionError(f"processes left after stopping Chromium: {left}")


def wait_for(page: DevTools, expression: str, what: str, timeout_s: float,
             fail_if: Callable[[dict], str | None] | None = None, every_s: float = 0.5):
    """Poll a JS expression until it returns a truthy `ok` field (the expression returns an object
    `{ok, ...}`); `fail_if(state)` may return a message to stop early. Raises with the last state."""
    deadline = time.monotonic() + timeout_s
    state: dict = {}
    while True:
        state = page.evaluate(expression) or {}
        if fail_if is not None and (msg := fail_if(state)):
            raise AssertionError(f"while waiting for {what}: {msg}")
        if state.get("ok"):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; last state: "
                                 f"{json.dumps(state)[:2000]}; page errors: {page.exceptions[-3:]}")
        time.sleep(every_s)


# --------------------------------------------------------------------------- JS probes
# Probes return plain objects (returnByValue). `w` is the lab's document widget, found by its path
# in the main area (`shell.currentWidget` follows the focus, which a headless page may not have).
FIND_DOC = """const w = Array.from(window.jupyterapp.shell.widgets('main')).find(
    (x) => x.context && x.context.path === %(path)s);"""

JS_OPENED = """(() => {
  const app = window.jupyterapp; if (!app) return {ok: false, why: 'no window.jupyterapp yet'};
  """ + FIND_DOC + """
  if (!w) return {ok: false, why: 'the lab is not open (yet)',
                  open: Array.from(app.shell.widgets('main')).map((x) => x.title.label)};
  app.shell.activateById(w.id);
  const path = w.context.path;
  const isNotebook = w.node.classList.contains('jp-NotebookPanel');
  const kernel = w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return {ok: path === %(path)s && isNotebook && !!kernel && kernel.status === 'idle',
          path, isNotebook, classes: w.node.className, kernel: kernel ? kernel.status : null,
          kernelName: kernel ? kernel.name : null};
})()"""

JS_RUN_STATE = """(() => {
  """ + FIND_DOC + """
  const cells = w.content.widgets;
  const errors = [], stderr = [];
  let executed = 0, running = 0;
  cells.forEach((cell, i) => {
    if (cell.model.type !== 'code') return;
    if (cell.model.executionCount !== null) executed += 1;
    if (cell.node.querySelector('.jp-InputPrompt') &&
        cell.node.querySelector('.jp-InputPrompt').textContent.includes('*')) running += 1;
    for (let k = 0; k < cell.model.outputs.length; k++) {
      const out = cell.model.outputs.get(k).toJSON();
      if (out.output_type === 'error')
        errors.push({cell: i, ename: out.ename, evalue: out.evalue,
                     traceback: (out.traceback || []).join('\\n').replace(/\\x1b\\[[0-9;]*m/g, '').slice(-3000)});
    }
    cell.node.querySelectorAll('.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]').forEach(
      (n) => { if (/Traceback|Error:/.test(n.textContent)) stderr.push({cell: i, text: n.textContent.slice(-2000)}); });
  });
  const kernel = w.sessionContext.session.kernel;
  const status = kernel ? kernel.status : 'none';
  return {ok: executed === %(n_code)d && running === 0 && status === 'idle',
          executed, running, status, errors, stderr};
})()"""

JS_CELL_OUTPUT = """(() => {
  """ + FIND_DOC + """
  const cell = w.content.widgets[%(index)d];
  cell.node.scrollIntoView({block: 'start'});
  const area = cell.node.querySelector('.jp-OutputArea');
  return {ok: true, text: area ? area.innerText : null};
})()"""

JS_SLIDER_STATE = """(() => {
  """ + FIND_DOC + """
  const cell = w.content.widgets[%(index)d];
  const slider = cell.node.querySelector('.widget-slider');
  const handle = slider && slider.querySelector('.noUi-handle');
  const readout = slider && slider.querySelector('.widget-readout');
  const img = cell.node.querySelector('.jupyter-widgets-output-area img, .widget-output img');
  return {ok: !!(handle && readout && img && img.complete && img.naturalWidth > 0),
          value: readout ? readout.textContent.trim() : null,
          max: handle ? handle.getAttribute('aria-valuemax') : null,
          img: img ? img.src.length + ':' + img.src.slice(-64) : null};
})()"""

JS_SAVE = """(async () => {
  """ + FIND_DOC + """
  window.jupyterapp.shell.activateById(w.id);
  await window.jupyterapp.commands.execute('docmanager:save');
  return {ok: !w.context.model.dirty, dirty: w.context.model.dirty};
})()"""

JS_FOCUS_HANDLE = """(() => {
  """ + FIND_DOC + """
  const cell = w.content.widgets[%(index)d];
  cell.node.scrollIntoView({block: 'center'});
  const handle = cell.node.querySelector('.widget-slider .noUi-handle');
  handle.focus();
  return document.activeElement === handle;
})()"""


def kernel_display_name() -> str:
    """The display name of the `python3` kernel JupyterLab starts (it writes it into a saved lab)."""
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager().get_kernel_spec("python3").display_name


def assert_saved_lab_is_the_source(root: Path, state: dict) -> None:
    """After a save from JupyterLab, the lab's .md is its source (outputs, counts and widget state
    dropped), but for the kernel's display name in the header, and no other file (no .ipynb) was
    written next to it (`.ipynb_checkpoints/` aside, which git ignores)."""
    source = (REPO / LAB).read_text()
    name = kernel_display_name()
    expected = source.replace("  display_name: Python 3\n", f"  display_name: {name}\n", 1)
    written = (root / LAB).read_text()
    assert written == expected, (
        f"saving {LAB} from JupyterLab changed more than the kernel name (jupytext.toml?); state {state}:\n"
        + "".join(difflib.unified_diff(expected.splitlines(True), written.splitlines(True), "source", "saved"))[:3000])
    others = sorted(p.name for p in (root / "labs").iterdir() if p.name not in {Path(LAB).name, ".ipynb_checkpoints"})
    assert not others, f"saving {LAB} from JupyterLab wrote {others} next to it"


def js(template: str, **values) -> str:
    """A probe with the lab's path (and `values`) filled in."""
    return template % {"path": json.dumps(LAB), **values}


def _run_failure(state: dict) -> str | None:
    if state.get("errors"):
        e = state["errors"][0]
        return f"cell {e['cell']} raised {e['ename']}: {e['evalue']}\n{e['traceback']}"
    if state.get("stderr"):
        s = state["stderr"][0]
        return f"cell {s['cell']} wrote a traceback to stderr:\n{s['text']}"
    if state.get("status") in ("dead", "unknown"):
        return f"the kernel is {state['status']}"
    return None


# --------------------------------------------------------------------------- tests
@pytest.mark.slow
def test_lab1_runs_in_jupyterlab(chromium, tmp_path):
    if importlib.util.find_spec("jupyterlab") is None:
        _unavailable("JupyterLab is not installed: pip install -e '.[lab]' (make setup installs it)")
    cells = find_lab_cells(REPO / LAB)
    failure_shot = ARTIFACTS / "jupyterlab_lab01_failure.png"
    for stale in (failure_shot, ARTIFACTS / "jupyterlab_server.log"):
        stale.unlink(missing_ok=True)
    t_start = time.monotonic()
    with jupyterlab_server(tmp_path) as server, chromium_page(chromium, tmp_path) as page:
        try:
            page.send("Page.navigate", url=f"{server.url}/lab/tree/{LAB}?token={server.token}")
            opened = wait_for(page, js(JS_OPENED),
                              f"{LAB} to open as a notebook with an idle kernel", TIMEOUT_OPEN_S,
                              fail_if=lambda s: None if s.get("isNotebook") is not False or s.get("path") != LAB
                              else f"{LAB} opened as {s.get('classes')!r}, not as a notebook: the default "
                                   "viewer for .md (tools/jupyterlab/settings/overrides.json) was not applied")
            assert opened["kernelName"] == "python3", opened
            open_s = time.monotonic() - t_start

            t0 = time.monotonic()
            page.evaluate("void window.jupyterapp.commands.execute('notebook:run-all-cells')")
            wait_for(page, js(JS_RUN_STATE, n_code=cells.n_code),
                     f"all {cells.n_code} code cells to run and the kernel to go idle", TIMEOUT_RUN_S,
                     fail_if=_run_failure, every_s=1.0)
            run_s = time.monotonic() - t0

            out = page.evaluate(js(JS_CELL_OUTPUT, index=cells.first_assert))["text"] or ""
            assert "preset 'smoke'" in out, (
                f"cell {cells.first_assert} (the first with an assert) should print the smoke preset, "
                f"showed {out[:500]!r}")
            page.screenshot(ARTIFACTS / "jupyterlab_lab01_run.png")

            t0 = time.monotonic()
            before = wait_for(page, js(JS_SLIDER_STATE, index=cells.slider),
                              "the explorer's slider and figure to render", TIMEOUT_WIDGET_S)
            assert before["max"] and float(before["value"]) < float(before["max"]), before
            assert page.evaluate(js(JS_FOCUS_HANDLE, index=cells.slider)), "could not focus the slider handle"
            page.key("End", 35)  # noUiSlider: End moves the handle to its maximum
            after = wait_for(
                page, f"""(() => {{ const s = {js(JS_SLIDER_STATE, index=cells.slider)};
                    s.ok = s.ok && Number(s.value) === Number(s.max) && s.img !== {json.dumps(before["img"])};
                    return s; }})()""",
                f"the slider to move to {before['max']} and the figure to be re-drawn", TIMEOUT_WIDGET_S)
            page.screenshot(ARTIFACTS / "jupyterlab_lab01_widget.png")

            # Save, as a reader (or the autosave) would: the .md must come back without outputs.
            saved = wait_for(page, js(JS_SAVE), "the lab to be saved", TIMEOUT_WIDGET_S)
            assert_saved_lab_is_the_source(server.root, saved)
            print(f"\nJupyterLab: server, browser and lab 1 open with a kernel in {open_s:.0f} s, all cells run "
                  f"in {run_s:.0f} s, slider {before['value']} -> {after['value']} and figure re-drawn in "
                  f"{time.monotonic() - t0:.1f} s")
        except BaseException:
            with contextlib.suppress(Exception):
                page.screenshot(failure_shot)
            with contextlib.suppress(Exception):
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                shutil.copy2(server.log, ARTIFACTS / "jupyterlab_server.log")
            raise


def test_make_lab_is_token_protected_on_localhost():
    """`make lab` binds to 127.0.0.1, keeps token auth, and uses the repository's settings dir."""
    if shutil.which("make") is None:
        pytest.skip("no `make` on PATH")
    r = subprocess.run(["make", "-n", "lab"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"`make -n lab` failed:\n{r.stderr}"
    lines = r.stdout.replace("\\\n", " ").splitlines()  # join continuation lines
    cmd = next((line for line in lines if "jupyter lab" in line), None)
    assert cmd, f"`make -n lab` runs no `jupyter lab` command:\n{r.stdout}"
    args = shlex.split(cmd)
    assert "--ServerApp.ip=127.0.0.1" in args, f"make lab must bind to localhost: {cmd}"
    assert not any(a.startswith(("--IdentityProvider.token=", "--ServerApp.token=", "--NotebookApp.token="))
                   for a in args), f"make lab must keep the generated token: {cmd}"
    assert f"--LabApp.app_settings_dir={SETTINGS_DIR}" in args, f"make lab must use {SETTINGS_DIR}: {cmd}"


def test_md_labs_open_as_notebooks_and_save_without_outputs():
    """The repository's JupyterLab overrides open .md with jupytext's notebook viewer, and
    jupytext.toml pairs nothing (no .ipynb is written next to a lab) and drops the version stamp."""
    import tomllib

    overrides = json.loads((SETTINGS_DIR / "overrides.json").read_text())
    viewers = overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers.get("markdown") == "Jupytext Notebook", viewers
    config = tomllib.loads(JUPYTEXT_TOML.read_text())
    assert "formats" not in config, "jupytext.toml must not pair the labs with .ipynb files"
    assert "-jupytext.text_representation.jupytext_version" in config.get("notebook_metadata_filter", "")


def test_saving_a_lab_from_jupyterlab_keeps_the_source(tmp_path):
    """A lab saved through jupytext's contents manager (what JupyterLab's save and autosave call)
    with outputs, execution counts and widget state comes back byte for byte, and no .ipynb
    appears. (The browser test saves from JupyterLab itself, kernel metadata included.)"""
    pytest.importorskip("jupyter_server", reason="JupyterLab is not installed: pip install -e '.[lab]'")
    from jupyter_server.services.contents.largefilemanager import LargeFileManager
    from jupytext.sync_contentsmanager import build_sync_jupytext_contents_manager_class

    (tmp_path / "labs").mkdir()
    shutil.copy2(JUPYTEXT_TOML, tmp_path / "jupytext.toml")
    shutil.copy2(REPO / LAB, tmp_path / LAB)
    manager = build_sync_jupytext_contents_manager_class(LargeFileManager)(root_dir=str(tmp_path))
    nb = manager.get(LAB, content=True, type="notebook")["content"]
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.outputs = [{"output_type": "stream", "name": "stdout", "text": "an output\n"}]
        cell.execution_count = i + 1
        cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    manager.save({"type": "notebook", "format": "json", "content": nb}, LAB)
    assert sorted(p.name for p in (tmp_path / "labs").iterdir()) == [Path(LAB).name]
    assert (tmp_path / LAB).read_text() == (REPO / LAB).read_text()
