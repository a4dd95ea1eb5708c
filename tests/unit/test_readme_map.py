"""The README's map ("Where things are") lists every module of jobs/ and traceviz/, and
nothing that is not there: a module added or moved without a line in the map fails here."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def modules() -> set[str]:
    """Every Python module of the packages, but package markers and migrations."""
    found = set()
    for package in ("jobs", "traceviz"):
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if path.name != "__init__.py" and "migrations" not in relative.parts:
                found.add(relative.as_posix())
    return found


def mapped_modules(readme: str) -> set[str]:
    """The module paths the map's table names (in backticks, in its first column)."""
    section = readme.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    first_cells = re.findall(r"^\| (.+?) \|", section, re.MULTILINE)
    return {path for cell in first_cells for path in re.findall(r"`([\w/]+\.py)`", cell)}


def test_the_readme_map_lists_every_module():
    mapped = mapped_modules((ROOT / "README.md").read_text())
    assert sorted(modules() - mapped) == [], "modules missing from the README's map"
    assert sorted(mapped - modules()) == [], "the README's map names modules that do not exist"


def test_a_module_missing_from_the_map_is_found():
    readme = "## Where things are\n\n| module | what |\n| --- | --- |\n| `jobs/models.py` | x |\n"
    assert "jobs/models.py" in mapped_modules(readme)
    assert "jobs/tasks.py" in modules() - mapped_modules(readme)
