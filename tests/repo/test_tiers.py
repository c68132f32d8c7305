"""tests/ is four tiers (tests/conftest.py): unit, integration, book and repo, beside the shared
conftest and helpers.  A test file left in tests/ itself or in a fifth folder would be in neither
tier of `make test-fast` (tests/unit and tests/repo), and two files of one name would collide under
pytest's "prepend" imports (a test's folder goes on sys.path, not a package)."""
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
TIERS = {"unit", "integration", "book", "repo"}


def test_every_test_file_is_in_one_tier():
    assert not list(TESTS.glob("test_*.py")), "a test file belongs in tests/unit, integration, book or repo"
    assert {p.parent.name for p in TESTS.rglob("test_*.py")} == TIERS
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), "two test files of one name"
