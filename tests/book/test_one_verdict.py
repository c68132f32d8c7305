"""One question, one verdict across the book (issue 36): where the stability map gives this book's
answer, no chapter or lab may state the opposite as the book's own.

Each rule is a phrase that would contradict the map, with the map's verdict.  A sentence that
matches passes only if it attributes the claim to a source or states it negatively (the post, the
series, a paper; "not", "no", "never", ...): quoting the post's finding next to the book's is how
the chapters are meant to read."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "labs").glob("*.md"))
ATTRIBUTED = re.compile(r"\b(not|no|never|none|nothing|neither|nor|post|posts|series|paper|papers|Liu|Li et al|"
                        r"reported|reports|saw|sources?|third-party|whether|if|would|criterion|tested|claims?|"
                        r"quoted|argues?|suggests?|predicts?|hypothesis)\b", re.I)
# (phrase, the map's verdict: research/stability_map and book/ch_when_speed_kills.md)
RULES = [
    (r"\bearly warning\b|\brises? before (the )?(reward|collapse|fall)",
     "no monitor warned early on the map: k3 is a level, readable from the first steps"),
    (r"decoupled[^.]*\bnatural choice\b",
     "at four steps of staleness only bypass PPO-clip held; decoupled corrections did not"),
    (r"\brejection\b[^.]*\bbefore\b[^.]*\bweights?\b",
     "Seq-MIS (a rejection mask) collapsed every seed at four steps of staleness"),
    (r"\bSeq-MIS\b[^.]*\b(best|wins|the fix)\b",
     "the map's best correction was bypass PPO-clip; the post's one-sided Seq-MIS was a null"),
]


def sentences(text: str) -> list[str]:
    text = re.sub(r"```\{code-cell\}.*?```", " ", text, flags=re.S)      # prose only
    return re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", text))


@pytest.mark.parametrize("page", PAGES, ids=[f"{p.parent.name}/{p.stem}" for p in PAGES])
def test_no_page_contradicts_the_maps_verdicts(page):
    found = [f"{page.relative_to(ROOT)}: {s.strip()[:160]!r} contradicts: {verdict}"
             for s in sentences(page.read_text(encoding="utf-8"))
             for pattern, verdict in RULES
             if re.search(pattern, s, flags=re.I) and not ATTRIBUTED.search(s)]
    assert not found, "\n".join(found)


def test_the_rules_catch_a_contradiction_and_let_attributed_claims_pass():
    bad = "Watch k3: it is an early warning of the collapse."
    good = ["The post saw k3 rise before the reward fell.", "No monitor is an early warning here."]
    hit = lambda s: any(re.search(p, s, flags=re.I) for p, _ in RULES) and not ATTRIBUTED.search(s)  # noqa: E731
    assert hit(bad) and not any(hit(s) for s in good)
