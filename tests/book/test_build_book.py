"""tools/jupyter_book_parallel.py, which `make book` runs: with RL_LAB_BOOK_JOBS=2 Sphinx reads
the pages in parallel processes under the book's own extensions and -W (an extension that does not
declare itself parallel-safe would be a warning, and so a failure), and the executed pages' kernels
are started by different reader processes: the pages ran side by side, not one after the other."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

CODE_PAGE = """---
jupytext:
  text_representation: {{extension: .md, format_name: myst}}
kernelspec: {{display_name: Python 3, language: python, name: python3}}
---
# Executed page {n}

```{{code-cell}} ipython3
import json, os
from pathlib import Path
Path("reader{n}.json").write_text(json.dumps({{"reader": os.getppid(), "threads": os.environ.get("OMP_NUM_THREADS")}}))
```
"""


def mini_book(folder: Path) -> None:
    """The repository's _config.yml (extensions, bibliography, execution settings) over six
    text pages and two executed ones; no vendored assets."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["sphinx"]["config"].pop("html_static_path")
    config["sphinx"]["config"].pop("html_css_files")
    config["exclude_patterns"] = ["_build", ".*", "**/.*"]
    (folder / "_config.yml").write_text(yaml.safe_dump(config))
    shutil.copy(ROOT / "references.bib", folder / "references.bib")
    pages = [f"text{i}" for i in range(6)] + ["code0", "code1"]
    for i in range(6):
        (folder / f"text{i}.md").write_text(f"# Text page {i}\n\nText.\n")
    for n in range(2):
        (folder / f"code{n}.md").write_text(CODE_PAGE.format(n=n))
    (folder / "intro.md").write_text("# Intro\n")
    toc = {"format": "jb-book", "root": "intro",
           "parts": [{"caption": "A", "chapters": [{"file": p} for p in pages[:4]]},
                     {"caption": "B", "chapters": [{"file": p} for p in pages[4:]]}]}
    (folder / "_toc.yml").write_text(yaml.safe_dump(toc))


def test_two_pages_execute_side_by_side_under_the_books_extensions(tmp_path):
    mini_book(tmp_path)
    env = dict(os.environ, RL_LAB_BOOK_JOBS="2", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "jupyter_book_parallel.py"), "build", str(tmp_path),
                          "--all", "-W", "-n", "--keep-going"],
                         capture_output=True, text=True, timeout=600, env=env)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    assert "build_book: reading 9 pages, 2 at a time" in log, log[-4000:]
    readers = [json.loads((tmp_path / f"reader{n}.json").read_text()) for n in range(2)]
    assert readers[0]["reader"] != readers[1]["reader"], readers   # two reader processes
    assert all(r["threads"] == "1" for r in readers), readers
    assert (tmp_path / "_build" / "html" / "code1.html").exists()
