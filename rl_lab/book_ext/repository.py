"""Sphinx extension: the book's repository URL, and the buttons that need it.

The URL is found in one place, in this order:

1. `repository: url:` in _config.yml, if set (pin it there by hand);
2. GitHub Actions' `$GITHUB_SERVER_URL/$GITHUB_REPOSITORY` (the Pages workflow, .github/workflows/book.yml);
3. `git remote get-url origin` of the checkout being built (an SSH remote becomes its https URL).

With a URL the page header gets the repository button and the launch buttons configured under
`launch_buttons:` in _config.yml (Binder); without one (a tarball, a clone with no remote) they
are left out, so the build never carries a placeholder link.  The buttons are plain links: nothing
is loaded at build time or when a page opens.  Labs are MyST Markdown, so Colab (which opens only
.ipynb files from GitHub) is not a button: each lab page's download menu offers the .ipynb, which
Colab opens with File -> Upload notebook (book/workshop.md).

The same URL fills two MyST substitutions that pages use where they name it (book/workshop.md):
`{{ binder_route }}` and `{{ colab_install }}`, a sentence each; without a URL they say what to
do without one, so no page carries a placeholder such as `<owner>/<repository>` either.

Loaded by _config.yml (`sphinx: extra_extensions: [rl_lab.book_ext.repository]`).  Only Sphinx
imports this module; nothing in rl_lab does.
"""
from __future__ import annotations

import os
import re
import subprocess

from sphinx.util import logging

LOG = logging.getLogger(__name__)
LAUNCH_KEYS = ("binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url", "jupyterlite_url")


def https_url(remote: str) -> str | None:
    """A git remote as an https URL without .git: git@github.com:o/r.git -> https://github.com/o/r.
    None for anything that is not a hosted org/repo remote (a local path, a file:// URL)."""
    remote = remote.strip()
    m = re.match(r"^(?:ssh://)?git@([^:/]+)[:/]([^/]+)/([^/]+?)(?:\.git)?/?$", remote)
    if m:
        return f"https://{m.group(1)}/{m.group(2)}/{m.group(3)}"
    m = re.match(r"^https?://(?:[^@/]+@)?([^/]+)/([^/]+)/([^/]+?)(?:\.git)?/?$", remote)
    if m:
        return f"https://{m.group(1)}/{m.group(2)}/{m.group(3)}"
    return None


def git_origin(cwd: str) -> str | None:
    """`git remote get-url origin` in `cwd`, or None."""
    try:
        out = subprocess.run(["git", "remote", "get-url", "origin"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def find_repository_url(configured: str | None, env: dict, origin: str | None) -> str | None:
    """The repository URL: the configured one, else GitHub Actions', else the origin remote's."""
    if configured and configured.strip():
        return configured.strip().rstrip("/")
    if env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL") or "https://github.com"
        return f"{server.rstrip('/')}/{env['GITHUB_REPOSITORY']}"
    return https_url(origin) if origin else None


def apply_repository(theme_options: dict, url: str | None) -> dict:
    """Theme options with the repository URL and its buttons, or with the buttons left out."""
    opts = dict(theme_options)
    launch = dict(opts.get("launch_buttons") or {})
    if url:
        opts["repository_url"] = url
        opts["use_repository_button"] = True
    else:
        opts.pop("repository_url", None)
        opts["use_repository_button"] = False
        opts["use_edit_page_button"] = False
        opts["use_issues_button"] = False
        for key in LAUNCH_KEYS:     # sphinx-book-theme needs the URL to build these links
            launch[key] = ""
        launch["thebe"] = False
    opts["launch_buttons"] = launch
    return opts


def substitutions(url: str | None) -> dict[str, str]:
    """The MyST substitutions that name the repository (Markdown, one sentence each)."""
    if url:
        return {"binder_route": "the launch button (the rocket) starts it on Binder,",
                "colab_install": f'Their first cell must then install the package: `!pip install "rl-lab @ git+{url}"`.'}
    return {"binder_route": "a build of this book that knows its repository has a launch button that starts "
                            "it on Binder (this one does not),",
            "colab_install": "Their first cell must then `pip install` the package from the repository's URL "
                             "(this build of the book does not know it)."}


def _on_config_inited(app, config) -> None:
    opts = dict(config.html_theme_options or {})
    url = find_repository_url(opts.get("repository_url"), dict(os.environ), git_origin(app.srcdir))
    config.html_theme_options = apply_repository(opts, url)
    if hasattr(config, "myst_substitutions"):      # read by myst-parser at builder-inited, after this
        config.myst_substitutions = {**(config.myst_substitutions or {}), **substitutions(url)}
    LOG.info(f"rl_lab.book_ext.repository: {url or 'no repository URL found: no repository or launch buttons'}")


def setup(app):
    app.connect("config-inited", _on_config_inited, priority=400)   # before the theme reads it
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
