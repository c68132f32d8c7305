"""tools/lab_stamp.py: `make test` skips under nbval only the labs that `make book` executed from
the very same files and environment; any change runs every lab again."""
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("lab_stamp", Path(__file__).resolve().parents[2] / "tools" / "lab_stamp.py")
lab_stamp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lab_stamp)

ENV = {"RL_LAB_PRESET": "smoke"}



@pytest.fixture
def repo(tmp_path):
    """A git checkout with two labs, one of them in the book's table of contents."""
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "lab_a.md").write_text("# a\n")
    (tmp_path / "labs" / "lab_b.md").write_text("# b\n")
    (tmp_path / "pkg.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("_build/\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nparts:\n"
                                       "  - chapters:\n      - file: labs/lab_a\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    return tmp_path


def test_all_labs_run_without_a_record(repo):
    assert lab_stamp.stale_labs(repo, ENV) == ["labs/lab_a.md", "labs/lab_b.md"]


def test_a_recorded_build_skips_only_the_labs_it_executed(repo):
    data = lab_stamp.record(repo)
    assert data["labs"] == ["labs/lab_a.md"] and len(data["fingerprint"]) == 64
    env = dict(os.environ)   # record() reads os.environ: compare under the same values
    assert lab_stamp.stale_labs(repo, env) == ["labs/lab_b.md"]     # not in the book: nbval runs it
    # the build's own output (ignored by git) does not count as a change
    (repo / "_build" / "html").mkdir(parents=True)
    (repo / "_build" / "html" / "index.html").write_text("<html>")
    assert lab_stamp.stale_labs(repo, env) == ["labs/lab_b.md"]
    assert lab_stamp.stale_labs(repo, {**env, "RL_LAB_NBVAL_ALL": "1"}) == ["labs/lab_a.md", "labs/lab_b.md"]


@pytest.mark.parametrize("change", ["edit a package file", "new untracked file", "other preset", "no solutions"])
def test_any_change_runs_every_lab_again(repo, change):
    env = dict(os.environ)
    lab_stamp.record(repo)
    if change == "edit a package file":
        (repo / "pkg.py").write_text("x = 2\n")
    elif change == "new untracked file":
        (repo / "research.csv").write_text("1,2\n")
    elif change == "other preset":
        env["RL_LAB_PRESET"] = "laptop"
    else:
        env["RL_LAB_SOLUTIONS"] = "0"
    assert lab_stamp.stale_labs(repo, env) == ["labs/lab_a.md", "labs/lab_b.md"]


def test_outside_git_every_lab_runs(tmp_path):
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "lab_a.md").write_text("# a\n")
    (tmp_path / "_toc.yml").write_text("root: intro\nchapters:\n  - file: labs/lab_a\n")
    lab_stamp.record(tmp_path)
    assert lab_stamp.fingerprint(tmp_path) is None
    assert lab_stamp.stale_labs(tmp_path, ENV) == ["labs/lab_a.md"]


def test_the_real_book_lists_every_lab():
    """Every lab is in _toc.yml, so after `make book` nbval has none left to run twice."""
    root = Path(__file__).resolve().parents[2]
    assert sorted(lab_stamp.toc_labs(root)) == sorted(str(p.relative_to(root)) for p in (root / "labs").glob("*.md"))
