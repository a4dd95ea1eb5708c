"""Bulk writes for ingest: PostgreSQL COPY where it is available, multi-row INSERT elsewhere.

COPY moves rows without building a statement with thousands of placeholders, which is what
bounded ingest throughput (see bench/README.md). Both paths write the same rows.
"""

import json
from collections.abc import Iterable, Sequence

import orjson
from django.db import connection, models

INSERT_CHUNK = 500
STAGE_TABLE = "tv_stage_event"


def json_text(value) -> str:
    """Compact JSON text; orjson where it can (fast), the stdlib for integers past 64 bits."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _db_value(field: models.Field, value):
    if isinstance(field, models.JSONField):
        return json_text(value)
    return value


def insert_rows(model: type[models.Model], rows: Sequence[dict]) -> None:
    """Insert rows given as ``{attname: value}`` dicts (ids are not read back). Fields a row
    leaves out get their model default."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create([model(**row) for row in rows], batch_size=INSERT_CHUNK)
        return
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    defaults = {f.attname: f.get_default() for f in fields}
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(model._meta.db_table)
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(
                [
                    _db_value(f, row[f.attname] if f.attname in row else defaults[f.attname])
                    for f in fields
                ]  # fmt: skip
            )


def insert_new_events(
    table: str, columns: Sequence[str], rows: Iterable[tuple], key_columns=("job_id", "event_id")
) -> set[tuple]:
    """Insert event rows unless (job_id, event_id) is stored already; returns the new keys.

    ``rows`` hold Python values in ``columns`` order, with the payload as JSON text.
    """
    rows = list(rows)
    quoted = ", ".join(columns)
    keys = ", ".join(key_columns)
    conflict = f"ON CONFLICT ({keys}) DO NOTHING RETURNING {keys}"
    inserted: set[tuple] = set()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {STAGE_TABLE} ON COMMIT DELETE ROWS "
                f"AS SELECT {quoted} FROM {table} WITH NO DATA"
            )
            # ON COMMIT empties the stage only when the outermost transaction commits: a second
            # batch inside one transaction (an import, a test) must not see the first one's rows.
            cursor.execute(f"DELETE FROM {STAGE_TABLE}")
            with cursor.cursor.copy(f"COPY {STAGE_TABLE} ({quoted}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(
                f"INSERT INTO {table} ({quoted}) SELECT {quoted} FROM {STAGE_TABLE} {conflict}"
            )
            inserted.update(map(tuple, cursor.fetchall()))
            return inserted
        placeholder = "(" + ", ".join(["%s"] * len(columns)) + ")"
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start : start + INSERT_CHUNK]
            cursor.execute(
                f"INSERT INTO {table} ({quoted}) VALUES "
                + ", ".join([placeholder] * len(chunk))
                + f" {conflict}",
                [value for row in chunk for value in row],
            )
            inserted.update(map(tuple, cursor.fetchall()))
    return inserted
