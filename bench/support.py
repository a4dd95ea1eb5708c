"""Server time of support's queue at scale: 20,000 escalations (a fifth unresolved, and a
fifth of those on jobs that recovered), each with an audit entry or two.

Measures, with the test Client in-process (no network or browser time counted), against the
database DATABASE_URL names, creating its data there the first time (bulk_create):
the queue's first page, the queue filtered to recovered jobs (the ``job_recovered`` EXISTS
subquery on every row), a select-all preview of every unresolved escalation whose job
recovered (up to 1,000, the bulk limit) and the saved-views panel. Prints median and p95 over
N requests each. A select-all bulk assign of those escalations is applied once (it writes an
audit entry per escalation) and timed.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_bench .venv/bin/python bench/support.py
"""

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client, override_settings  # noqa: E402

from jobs.models import Escalation, EscalationEntry, Job, SavedView  # noqa: E402

PREFIX = "bench-support-"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
ESCALATIONS = 20_000
USER = "bench-support"


def create_queue() -> None:
    existing = Job.objects.filter(job_id__startswith=PREFIX).count()
    if existing >= ESCALATIONS:
        print(f"queue data: {existing} escalations already there")
        return
    started = time.perf_counter()
    batch = 5000
    for start in range(existing, ESCALATIONS, batch):
        numbers = range(start, min(start + batch, ESCALATIONS))
        unresolved = {n for n in numbers if n % 5 == 0}
        recovered = {n for n in unresolved if n % 25 == 0}
        Job.objects.bulk_create(
            [
                Job(
                    job_id=f"{PREFIX}{n:07d}",
                    status="completed" if n in recovered else "failed",
                    started_at=BASE + timedelta(seconds=n),
                )
                for n in numbers
            ],
            batch_size=batch,
        )
        jobs = dict(
            Job.objects.filter(job_id__in=[f"{PREFIX}{n:07d}" for n in numbers]).values_list(
                "job_id", "pk"
            )
        )
        escalations = Escalation.objects.bulk_create(
            [
                Escalation(
                    job_id=jobs[f"{PREFIX}{n:07d}"],
                    kind="user_action" if n % 2 else "internal",
                    node_id="n1",
                    severity="medium" if n % 2 else "high",
                    status="open" if n in unresolved else "resolved",
                    message="bench escalation",
                    triggered_at=BASE + timedelta(seconds=n),
                )
                for n in numbers
            ],
            batch_size=batch,
        )
        entries = []
        for n, escalation in zip(numbers, escalations, strict=True):
            entries.append(
                EscalationEntry(escalation=escalation, actor_name="traceviz", action="opened")
            )
            if n in recovered:
                entries.append(
                    EscalationEntry(
                        escalation=escalation, actor_name="traceviz", action="job recovered"
                    )
                )
            elif n not in unresolved:
                entries.append(
                    EscalationEntry(escalation=escalation, actor_name="x", action="resolved")
                )
        EscalationEntry.objects.bulk_create(entries, batch_size=batch)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "ANALYZE jobs_job; ANALYZE jobs_escalation; ANALYZE jobs_escalationentry"
            )
    print(f"queue data: created in {time.perf_counter() - started:.1f} s")


def timed(client: Client, method: str, url: str, runs: int, **kwargs) -> tuple[float, float]:
    call = client.get if method == "GET" else client.post
    call(url, **kwargs)  # warm
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        response = call(url, **kwargs)
        samples.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


# Static file URLs unhashed (no collectstatic needed), as in the test suite.
UNHASHED_STATIC = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}


@override_settings(STORAGES=UNHASHED_STATIC)
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    create_queue()
    user, _ = User.objects.get_or_create(username=USER)
    user.groups.add(Group.objects.get_or_create(name="support")[0])
    for n in range(20):
        SavedView.objects.get_or_create(
            owner=user, name=f"view {n}", defaults={"path": "/escalations/", "query": f"kind=k{n}"}
        )
    client = Client()
    client.force_login(user)
    htmx = {"HTTP_HX_REQUEST": "true", "HTTP_HX_CURRENT_URL": "http://testserver/escalations/"}
    select_all = {"select_all": "1", "action": "assign", "assignee": "me"}
    print(f"{connection.vendor}, {ESCALATIONS:,} escalations, {args.runs} runs each")
    for label, method, url, kwargs in [
        ("queue, first page", "GET", "/escalations/", {}),
        ("queue, ?recovered=yes", "GET", "/escalations/?recovered=yes", {}),
        ("queue, ?status=all&recovered=no", "GET", "/escalations/?status=all&recovered=no", {}),
        (
            "select-all preview (recovered)",
            "POST",
            "/escalations/bulk/",
            {"data": {**select_all, "return_query": "recovered=yes"}, **htmx},
        ),
        ("saved views panel (20 views)", "GET", "/views/", htmx),
    ]:
        median, p95 = timed(client, method, url, args.runs, **kwargs)
        print(f"{label:40} median {median:7.1f} ms   p95 {p95:7.1f} ms")
    ids = list(
        Escalation.objects.filter(
            job__job_id__startswith=PREFIX, status="open", job__status="completed"
        ).values_list("pk", flat=True)
    )
    Escalation.objects.filter(pk__in=ids).update(assignee=None)
    began = time.perf_counter()
    response = client.post(
        "/escalations/bulk/",
        {"ids": ids, "action": "assign", "assignee": "me", "confirm": "1"},
        **htmx,
    )
    assert response.status_code == 200
    applied_ms = (time.perf_counter() - began) * 1000
    print(f"bulk assign of {len(ids)} escalations applied in {applied_ms:.0f} ms")


if __name__ == "__main__":
    main()
