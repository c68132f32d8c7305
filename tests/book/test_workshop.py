"""book/workshop.md: its links resolve, its smoke-preset times are BENCHMARKS.md's, and what it
tells participants to expect from `rl-lab doctor` is what the doctor prints."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "book" / "workshop.md").read_text(encoding="utf-8")


def test_links_resolve_and_the_page_is_in_the_toc():
    for target in re.findall(r"\{doc\}`([^`<]+)`", PAGE):
        assert (REPO / "book" / f"{target}.md").resolve().is_file(), f"workshop.md links to missing {target}"
    assert "file: book/workshop" in (REPO / "_toc.yml").read_text()


def test_plan_times_are_the_benchmarks():
    """The plan's smoke and laptop columns are BENCHMARKS.md's "Workshop plan" measurements."""
    bench = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    section = " ".join(bench[bench.index("## 4."):bench.index("## 5.")].split())   # lines rewrap
    rows = re.findall(r"^\|[^|]*\|[^|]*\| \{doc\}`\.\./labs/(\w+)` \| (\d+) s \| (\d+) s \|$", PAGE, re.M)
    assert len(rows) == 4, f"the plan's table should list four labs with smoke and laptop times, found {rows}"
    for lab, smoke, laptop in rows:
        m = re.search(rf"plan {lab} smoke (\d+) s laptop (\d+) s", section)
        assert m, f"BENCHMARKS.md section 4 has no workshop-plan time for {lab}"
        assert m.groups() == (smoke, laptop), (f"workshop.md: {lab} {smoke} s / {laptop} s, BENCHMARKS.md "
                                               f"{m.group(1)} s / {m.group(2)} s: update the page")


def test_the_advanced_block_times_are_the_benchmarks():
    """The optional block's rows (lab, cells, smoke time of those cells) are BENCHMARKS.md's."""
    bench = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    section = " ".join(bench[bench.index("## 4."):bench.index("## 5.")].split())   # lines rewrap
    block = PAGE[PAGE.index("## Optional: an advanced block"):PAGE.index("## Exercises to assign")]
    rows = re.findall(r"^\|[^|]*\|[^|]*\| \{doc\}`\.\./labs/lab(\d+)_\w+` \| first cell, sections ([^|]+?) \| (\d+) s \|$",
                      block, re.M)
    assert len(rows) == 3, f"the advanced block should list three labs with smoke times, found {rows}"
    for lab, sections, seconds in rows:
        m = re.search(rf"advanced lab {int(lab)} sections {re.escape(sections)} (\d+) s", section)
        assert m, f"BENCHMARKS.md section 4 has no time for lab {int(lab)} sections {sections}"
        assert m.group(1) == seconds, f"workshop.md: lab {lab} {sections} {seconds} s, BENCHMARKS.md {m.group(1)} s"


def test_the_doctor_line_participants_are_told_to_expect():
    from rl_lab.tools import doctor
    assert "ready for the labs" in PAGE and "rl-lab doctor" in PAGE
    assert "ready for the labs" in Path(doctor.__file__).read_text()
