"""The package layout's rules (docs/architecture.md) are executable: import-linter's contracts
in pyproject.toml hold for the tree, and a deliberate violation breaks them."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(project / "pyproject.toml"), "--no-cache"],
        cwd=project,
        # The producer client is a root package too, from its own distribution's folder.
        env={"PYTHONPATH": f"{project}{os.pathsep}{project / 'client'}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def project_copy(tmp_path) -> Path:
    """The project's packages and pyproject.toml in a scratch folder, to break on purpose."""
    for package in ("jobs", "traceviz", "client/traceviz_client"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(module: Path, line: str) -> None:
    module.write_text(module.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("jobs/ingest/projection.py", "from jobs.dashboard import rollup", "Layers"),
        ("jobs/escalations/actions.py", "from jobs import tasks", "never imports tasks"),
        ("jobs/replay/walk.py", "from django.conf import settings", "are pure"),
        ("jobs/contract/events.py", "import jobs.models", "are pure"),
        ("jobs/management/demo.py", "from jobs.web import access", "imported by nothing"),
        ("client/traceviz_client/__init__.py", "import django", "client stands alone"),
        ("client/traceviz_client/__init__.py", "from jobs import models", "client stands alone"),
    ],
)
def test_a_deliberate_violation_is_caught(project_copy, module, line, contract):
    add_import(project_copy / module, line)
    result = lint_imports(project_copy)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken
    dotted = module.removeprefix("client/").removesuffix(".py").removesuffix("/__init__")
    assert dotted.replace("/", ".") in broken


def test_an_import_circle_is_caught(project_copy):
    add_import(project_copy / "jobs/replay/rules.py", "from jobs.replay import walk")
    result = lint_imports(project_copy)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert "No import circle" in broken
    assert ".walk -> .rules" in broken


VENDOR_BRANCH = re.compile(r"\.vendor\s*(==|!=|in\b)|\[\s*\w*connection\.vendor\s*\]")


def test_only_the_database_module_branches_on_the_vendor():
    """Vendor differences live in query expressions (``as_postgresql``/``as_sqlite``) or in
    ``jobs/ingest/database.py``; migrations may branch too (they run SQL of one database)."""
    branching = sorted(
        path.relative_to(ROOT).as_posix()
        for package in ("jobs", "traceviz")
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
        and path != ROOT / "jobs" / "ingest" / "database.py"
        and VENDOR_BRANCH.search(path.read_text())
    )
    assert branching == []
