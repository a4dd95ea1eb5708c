"""manage.py purge_text removes a string that got stored anyway, everywhere it landed."""

import pytest
from django.core.management import call_command
from django.db import connection

from jobs.models import Escalation
from tests.factories import finished, store

LEAK = "leaked-9f8e7d6c5b4a"  # nothing in redaction's shapes, so it is stored as sent


def tables_containing(needle: str) -> list[str]:
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            if not table.startswith("jobs_"):
                continue
            columns = [
                c.name for c in connection.introspection.get_table_description(cursor, table)
            ]
            cursor.execute(
                f"SELECT {', '.join(connection.ops.quote_name(c) for c in columns)} FROM {table}"
            )
            if any(needle in str(value) for row in cursor.fetchall() for value in row):
                found.append(table)
    return found


@pytest.fixture
def leaked(db):
    store(
        [
            finished(
                "upload",
                "permanent_failure",
                error_type="internal",
                reason=f"upload failed with key {LEAK}",
                payload_results={"k": [LEAK]},
            )
        ]
    )
    assert set(tables_containing(LEAK)) >= {
        "jobs_event",
        "jobs_job",
        "jobs_step",
        "jobs_escalation",
    }


def test_dry_run_counts_rows_and_changes_nothing(leaked, capsys):
    call_command("purge_text", LEAK, "--dry-run")
    out = capsys.readouterr().out
    assert "Event: 1 rows would change" in out
    assert "Step: 1 rows would change" in out
    assert "Escalation: 1 rows would change" in out
    assert "jobs_event" in tables_containing(LEAK)


def test_purge_removes_the_string_from_every_table(leaked):
    call_command("purge_text", LEAK)
    assert tables_containing(LEAK) == []
    escalation = Escalation.objects.get()
    assert "[PURGED]" in escalation.message


def test_purge_refuses_a_very_short_string(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="shorter than 4"):
        call_command("purge_text", "ab")


def test_purge_takes_ingests_job_locks(leaked, monkeypatch):
    from jobs.ingest import purge

    locked = []
    monkeypatch.setattr(purge, "lock_jobs", lambda job_ids: locked.append(sorted(job_ids)))
    call_command("purge_text", LEAK, stdout=None)
    assert locked == [["j1"]]
