"""The book's repository URL and launch buttons (rl_lab.book_ext.repository, binder/): found in one
place, never a placeholder, plain links only; and a real Sphinx build with sphinx-book-theme."""
import re
from pathlib import Path

import pytest
import yaml

pytest.importorskip("sphinx_book_theme")
pytest.importorskip("myst_nb")
from rl_lab.book_ext.repository import apply_repository, find_repository_url, https_url  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
URL = "https://github.com/example/stable-rl-lm"


@pytest.mark.parametrize("remote,url", [
    ("git@github.com:example/stable-rl-lm.git", URL),
    ("ssh://git@github.com/example/stable-rl-lm.git", URL),
    ("https://github.com/example/stable-rl-lm.git", URL),
    ("https://github.com/example/stable-rl-lm", URL),
    ("https://token@github.com/example/stable-rl-lm.git/", URL),
    ("/srv/git/stable-rl-lm.git", None),
    ("file:///srv/git/stable-rl-lm", None),
])
def test_https_url(remote, url):
    assert https_url(remote) == url


def test_the_url_is_the_configured_one_then_github_actions_then_origin():
    actions = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "org/actions-repo"}
    origin = "git@github.com:org/origin-repo.git"
    assert find_repository_url("https://github.com/org/pinned/", actions, origin) == "https://github.com/org/pinned"
    assert find_repository_url("", actions, origin) == "https://github.com/org/actions-repo"
    assert find_repository_url("", {"GITHUB_REPOSITORY": "org/r"}, None) == "https://github.com/org/r"
    assert find_repository_url(None, {}, origin) == "https://github.com/org/origin-repo"
    assert find_repository_url("", {}, None) is None
    assert find_repository_url("", {}, "/local/path") is None


def test_without_a_url_every_button_that_needs_one_is_off():
    opts = {"launch_buttons": {"binderhub_url": "https://mybinder.org", "notebook_interface": "jupyterlab"},
            "use_repository_button": True, "repository_url": ""}
    off = apply_repository(opts, None)
    assert not off["use_repository_button"] and "repository_url" not in off
    assert off["launch_buttons"]["binderhub_url"] == "" and off["launch_buttons"]["notebook_interface"] == "jupyterlab"
    on = apply_repository(opts, URL)
    assert on["repository_url"] == URL and on["use_repository_button"]
    assert on["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    assert opts["launch_buttons"]["binderhub_url"] == "https://mybinder.org"   # the input is not changed


def test_config_has_no_placeholder_and_loads_both_extensions():
    cfg = yaml.safe_load((REPO / "_config.yml").read_text())
    assert "OWNER" not in (REPO / "_config.yml").read_text()
    assert "rl_lab.book_ext.repository" in cfg["sphinx"]["extra_extensions"]
    assert cfg["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    assert not cfg["launch_buttons"]["thebe"], "Thebe loads its JavaScript from a CDN"
    assert not cfg["html"]["use_repository_button"], "switched on by rl_lab.book_ext.repository when the URL is known"


def test_binder_pins_the_projects_torch():
    from rl_lab.tools.doctor import locked_versions
    pin = locked_versions()["torch"]             # rl_lab/constraints.txt, which install_torch.sh reads
    reqs = (REPO / "binder/requirements.txt").read_text()
    assert f"torch=={pin}+cpu" in reqs.splitlines()
    assert (REPO / "binder/runtime.txt").read_text().strip() == "python-3.11"
    post = (REPO / "binder/postBuild").read_text()
    assert "pip install --no-cache-dir -c rl_lab/constraints.txt -e ." in post and "Jupytext Notebook" in post


def _build(tiny_sphinx, github_repository):
    return tiny_sphinx(
        {"labs/lab01.md": (REPO / "labs" / "lab01_first_rl_run.md").read_text(),
         "index.md": "# Book\n\n```{toctree}\nlabs/lab01\n```\n"},
        extensions=["dollarmath", "amsmath", "colon_fence"], github_repository=github_repository,
        theme_options="{'launch_buttons': {'binderhub_url': 'https://mybinder.org', "
                      "'notebook_interface': 'jupyterlab'}, 'repository_url': '', 'repository_branch': 'main', "
                      "'use_repository_button': False}")


def test_a_real_build_links_binder_and_publishes_the_notebook(tiny_sphinx):
    html_dir = _build(tiny_sphinx, "example/stable-rl-lm")
    page = (html_dir / "labs" / "lab01.html").read_text(encoding="utf-8")
    assert "https://mybinder.org/v2/gh/example/stable-rl-lm/main?urlpath=lab/tree/labs/lab01.md" in page
    assert f'href="{URL}"' in page
    assert "_sources/labs/lab01.ipynb" in page                 # the download menu's notebook (for Colab)
    assert (html_dir / "_sources" / "labs" / "lab01.ipynb").stat().st_size > 1000
    external = re.findall(r'<script[^>]+src="(https?://[^"]+)"', page)
    assert all("mathjax" in src for src in external), \
        f"a launch button must not load a script: {external} (MathJax is this bare conf's CDN default)"


def test_a_build_with_no_url_has_no_launch_or_repository_links(tiny_sphinx):
    html_dir = _build(tiny_sphinx, None)         # a temp folder: no git remote either
    page = (html_dir / "labs" / "lab01.html").read_text(encoding="utf-8")
    assert "mybinder.org" not in page and "github.com/" not in page
