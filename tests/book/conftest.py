"""Shared fixtures of the book's tests."""
from __future__ import annotations

import pytest


@pytest.fixture
def tiny_sphinx(tmp_path, monkeypatch):
    """A one-off Sphinx HTML build of a few pages with rl_lab's repository extension and the book's
    theme, the repository URL taken from `github_repository` as GitHub Actions sets it (None: no URL).

        html_dir = tiny_sphinx({"index.md": "# Book\\n"}, extensions=["substitution"], github_repository=None)

    `files` maps a path under the source folder to its text; `extensions` are MyST extensions;
    `theme_options` is the html_theme_options literal.  Returns the HTML output folder."""
    pytest.importorskip("sphinx_book_theme")
    pytest.importorskip("myst_nb")

    def build(files: dict, extensions: list[str], github_repository: str | None, theme_options: str) -> object:
        from sphinx.application import Sphinx

        src = tmp_path / "src"
        for name, text in files.items():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_text(text)
        (src / "conf.py").write_text(
            "extensions = ['myst_nb', 'rl_lab.book_ext.repository']\n"
            "nb_execution_mode = 'off'\n"
            f"myst_enable_extensions = {extensions!r}\n"
            "html_theme = 'sphinx_book_theme'\n"
            f"html_theme_options = {theme_options}\n")
        monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
        if github_repository:
            monkeypatch.setenv("GITHUB_REPOSITORY", github_repository)
            monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
        Sphinx(str(src), str(src), str(tmp_path / "html"), str(tmp_path / "doctrees"), "html",
               status=None, warning=None, freshenv=True).build()
        return tmp_path / "html"

    return build
