"""One question, one verdict across the book (issue 36): where "When speed kills stability"'s map
gives a verdict, no other page may state the opposite.  Each entry names the question, the map's
verdict, and phrasings that contradict it; the test fails when a page uses one of them."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "labs").glob("*.md"))

CONTRADICTIONS = [
    ("which correction holds under staleness",
     "only bypass PPO-clip held at four stale steps; rejection and weights only at milder staleness",
     [r"turn on rejection before weights", r"decoupled mode (is|as) the natural choice under asynchron",
      r"natural choice under asynchrony"]),
    ("do the monitors warn before a collapse",
     "k3 is a level from the first steps, not a precursor; the gradient norm never warned",
     [r"(watch|monitor)[^.]{0,200}\btogether\b[^.]{0,40}\.\s*The post[^.]*rise before",
      r"k3[^.]{0,60}\b(rises|rose) before the (reward|collapse|fall)[^.]{0,40}(here|in this book|on the map)"]),
    ("does a method separate from the others in reward under stationary noise",
     "no reward difference is resolved under the lab's stationary noise, but staleness separates them",
     [r"no reward difference between methods is\s+resolved\.?\s*$"]),
]


def compiled(pattern: str) -> re.Pattern:
    """Spaces in a phrasing match any run of white space (the pages wrap their lines)."""
    return re.compile(pattern.replace(" ", r"\s+"), re.I | re.M | re.S)


def pages_with(pattern: str) -> list[str]:
    rx = compiled(pattern)
    return [p.relative_to(ROOT).as_posix() for p in PAGES if rx.search(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("question, verdict, phrasings", CONTRADICTIONS, ids=[c[0] for c in CONTRADICTIONS])
def test_no_page_contradicts_the_maps_verdict(question, verdict, phrasings):
    offenders = {pattern: pages_with(pattern) for pattern in phrasings}
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, f"{question}: the map says {verdict!r}, but these pages say otherwise: {offenders}"


def test_the_check_can_fail(tmp_path):
    assert compiled(CONTRADICTIONS[0][2][0]).search("Watch the KL. Turn on\n  rejection before weights.")
    assert compiled(CONTRADICTIONS[1][2][0]).search(
        "What to watch**: the mismatch KL, the trainer's perplexity of the sampled text, and the\n  gradient "
        "norm, together. The post this book follows saw them rise before the reward fell")
