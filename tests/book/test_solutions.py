"""Exercise solutions (rl_lab.book_ext.solutions): closed dropdowns in the book, left out of a
RL_LAB_SOLUTIONS=0 build.  Checks the labs' one convention, the node filter, and a real
Sphinx + MyST-NB build of lab 1 (no execution) in both modes."""
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")
from docutils import nodes  # noqa: E402

from rl_lab.book_ext.solutions import remove_solutions, solutions_wanted  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LABS = sorted((REPO / "labs").glob("*.md"))
PAGES = LABS + sorted((REPO / "book").glob("*.md"))
ADMONITION = re.compile(r"^```\{admonition\} (.*)\n((?::\w+:.*\n)*)", re.M)


def exercises_section(text: str) -> str:
    """From '## Exercises' to the next H2 (or the end)."""
    start = text.index("\n## Exercises\n")
    nxt = re.search(r"\n## ", text[start + 5:])
    return text[start: start + 5 + nxt.start()] if nxt else text[start:]


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_every_lab_ends_with_numbered_exercises_and_one_closed_solutions_block(path):
    text = path.read_text(encoding="utf-8")
    assert "\n## Exercises\n" in text, f"{path.name}: no '## Exercises' section"
    section = exercises_section(text)
    exercises = re.findall(r"^(\d+)\. ", section.split("```{admonition}")[0], re.M)
    assert exercises and exercises == [str(i) for i in range(1, len(exercises) + 1)], \
        f"{path.name}: the exercises must be a numbered list 1., 2., ... before the solutions"
    blocks = ADMONITION.findall(section)
    assert [title for title, _ in blocks] == ["Solutions"], \
        f"{path.name}: after the exercises, one '```{{admonition}} Solutions' block (found {blocks})"
    body = section.split("```{admonition} Solutions", 1)[1]
    answers = re.findall(r"^(\d+)\. ", body, re.M)
    assert answers[:len(exercises)] == exercises, f"{path.name}: one numbered solution per exercise"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_every_solution_is_a_closed_dropdown(path):
    for title, options in ADMONITION.findall(path.read_text(encoding="utf-8")):
        if re.match(r"Solutions?\b", title):
            assert ":class: dropdown" in options, f"{path.name}: admonition {title!r} needs ':class: dropdown'"


def test_the_switch():
    assert solutions_wanted(None) and solutions_wanted("1") and solutions_wanted("")
    assert not solutions_wanted("0")
    with pytest.raises(ValueError, match="RL_LAB_SOLUTIONS='no'"):
        solutions_wanted("no")


def _admonition(title: str, text: str, classes=()) -> nodes.admonition:
    node = nodes.admonition("", nodes.title(text=title), nodes.paragraph(text=text), classes=list(classes))
    return node


def test_remove_solutions_takes_solution_admonitions_and_tagged_cells_only():
    doc = nodes.section()
    doc += nodes.paragraph(text="1. an exercise")
    doc += _admonition("Solutions", "the answer", ["dropdown"])
    doc += _admonition("Solution (exercise 2)", "another answer", ["dropdown"])
    doc += _admonition("Solutions are hard", "also removed: the title starts with Solutions")
    doc += _admonition("Note", "kept")
    doc += _admonition("Dissolution of the baseline", "kept")
    cell = nodes.container(classes=["cell", "tag_solution"])
    cell += nodes.literal_block(text="answer = 42")
    doc += cell
    inner = _admonition("Solutions", "outer", ["dropdown"])
    inner += _admonition("Solution", "nested")
    doc += inner
    assert remove_solutions(doc) == 5
    text = doc.astext()
    assert "answer" not in text and "nested" not in text and "also removed" not in text
    assert "an exercise" in text and "kept" in text and text.count("kept") == 2


@pytest.mark.parametrize("env_value,shown", [("1", True), ("0", False)])
def test_a_real_build_of_lab_1(tmp_path, monkeypatch, env_value, shown):
    """Sphinx + MyST-NB on lab 1 (not executed): its solution text is in the HTML, inside a
    dropdown admonition, with RL_LAB_SOLUTIONS=1 and absent with 0; its exercises are in both."""
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    lab = REPO / "labs" / "lab01_first_rl_run.md"
    shutil.copy(lab, src / "index.md")
    (src / "conf.py").write_text(
        "extensions = ['myst_nb', 'rl_lab.book_ext.solutions']\n"
        "nb_execution_mode = 'off'\n"
        "myst_enable_extensions = ['dollarmath', 'amsmath', 'colon_fence']\n")
    monkeypatch.setenv("RL_LAB_SOLUTIONS", env_value)
    app = Sphinx(str(src), str(src), str(tmp_path / "html"), str(tmp_path / "doctrees"), "html",
                 status=None, warning=None, freshenv=True)
    app.build()
    html = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    section = exercises_section(lab.read_text(encoding="utf-8"))
    first_answer = re.search(r"```\{admonition\} Solutions\n:class: dropdown\n\n1\. (.{20})", section).group(1)
    assert "Zero-spread groups" in html                       # the exercises stay
    assert (first_answer in html) is shown
    closed = re.search(r'class="(?:dropdown admonition|admonition dropdown)"[^>]*>\s*<p class="admonition-title">Solutions</p>', html)
    assert bool(closed) is shown, "the solutions must render as a dropdown admonition"
    if shown:
        assert html.index(first_answer) > closed.start()
