"""Per-job locks: every writer of a job's events or projection takes them (ingest, rebuild,
purge, retention), so two writers never project the same job from different event sets."""

import zlib
from collections.abc import Iterable

from jobs.ingest import database


def lock_jobs(job_ids: Iterable[str]) -> None:
    """Take the transaction-level locks of these jobs, in sorted order so two writers never
    deadlock. Must run inside a transaction; released when it ends. On SQLite, whose writers
    are serialised by the database itself, this does nothing."""
    keys = sorted({zlib.crc32(job_id.encode("utf-8")) for job_id in job_ids})
    database.lock_keys(keys)
