"""`jupyter-book` with Sphinx reading (so executing) N pages at once: what tools/build_book.sh runs.

    RL_LAB_BOOK_JOBS=2 python tools/jupyter_book_parallel.py build . --all -W   # any jupyter-book args

jupyter-book 1's command line has no option for Sphinx's parallel jobs, and with them Sphinx would
still read one page at a time here, silently: two extensions jupyter-book loads do not declare
whether they are safe in parallel.  This script passes the jobs, declares those two safe (the
section numbering across parts replaces what the main process runs after every page is read; the
LaTeX transforms keep no state and act only in a LaTeX build), hands Sphinx one page per parallel
task (its default batches ~17 pages, so the batch of labs would run alone at the end), and prints
one line when the pages are read in parallel (tests/book/test_build_book.py looks for it).
RL_LAB_BOOK_JOBS unset or 1: plain jupyter-book.
"""
from __future__ import annotations

import functools
import importlib
import os
import sys

EXTENSIONS_WITHOUT_DECLARATION = ("sphinx_multitoc_numbering", "sphinx_jupyterbook_latex")


def declare_parallel_safe(name: str) -> None:
    module = importlib.import_module(name)
    setup_extension = module.setup

    def setup(app):
        meta = setup_extension(app) or {}
        return {**meta, "parallel_read_safe": True, "parallel_write_safe": True}

    module.setup = setup


def enable_parallel_read(jobs: int) -> None:
    import jupyter_book.sphinx
    import sphinx.builders

    jupyter_book.sphinx.build_sphinx = functools.partial(jupyter_book.sphinx.build_sphinx, jobs=jobs)
    sphinx.builders.make_chunks = lambda arguments, nproc, maxbatch=10: [[a] for a in arguments]
    for name in EXTENSIONS_WITHOUT_DECLARATION:
        declare_parallel_safe(name)
    read_parallel = sphinx.builders.Builder._read_parallel

    def _read_parallel(self, docnames, nproc):
        print(f"build_book: reading {len(docnames)} pages, {nproc} at a time", flush=True)
        return read_parallel(self, docnames, nproc)

    sphinx.builders.Builder._read_parallel = _read_parallel


def main(argv: list[str]) -> None:
    jobs = int(os.environ.get("RL_LAB_BOOK_JOBS", "1"))
    if jobs > 1:
        enable_parallel_read(jobs)
    from jupyter_book.cli.main import main as jupyter_book

    jupyter_book(argv, prog_name="jupyter-book")


if __name__ == "__main__":
    main(sys.argv[1:])
