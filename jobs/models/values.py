"""How values are stored and read in SQL: JSON columns read back exactly, sums that cannot
overflow, and the expressions each database spells its own way."""

import json
from datetime import UTC, date, datetime
from typing import Any

import orjson
from django.db import NotSupportedError, models
from django.db.models import F, Func
from django.db.models.functions import Collate
from django.db.models.lookups import In
from django.utils import timezone

# Integers past 64 bits have 19 digits or more: with every digit made "0", such a run of digits
# is LONG_DIGITS.
DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


LONG_DIGITS = b"0" * 19


def json_text(value) -> str:
    """Compact JSON text; orjson where it can (fast), the stdlib for integers past 64 bits."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_value(text: str):
    """JSON text read back exactly: orjson, or the stdlib where the text has a run of 19 digits
    or more (orjson reads an integer past 64 bits as a float, silently; a string or a fraction
    with such a run reads the same either way). The run is looked for in C: a regular
    expression took four times as long as orjson's whole parse."""
    if len(text) < len(LONG_DIGITS):  # most step columns: "{}", "[]"
        return orjson.loads(text)
    raw = text.encode()
    return json.loads(text) if LONG_DIGITS in raw.translate(DIGITS_AS_ZERO) else orjson.loads(raw)


MAX_BIGINT = 2**63 - 1


class BoundedSum(models.Aggregate):
    """SUM of an integer column held at the largest 64-bit integer, null when every value is
    null (as SUM's). Token counts as large as their column holds, stored before ingest bounded
    them, add up past what a BIGINT holds: PostgreSQL's sum then fails its cast or insert and
    SQLite's SUM raises (its TOTAL does not: a float, exact below 2^53). ``sql`` writes the
    same for the dashboard rollup's raw SQL."""

    function = "SUM"
    name = "BoundedSum"
    output_field = models.BigIntegerField()
    TEMPLATES = {
        "postgresql": (
            f"CAST(CASE WHEN SUM(<x>) > {MAX_BIGINT} THEN {MAX_BIGINT} ELSE SUM(<x>) END AS BIGINT)"
        ),
        "sqlite": (
            "CASE WHEN COUNT(<x>) = 0 THEN NULL "
            f"ELSE CAST(MIN(TOTAL(<x>), {MAX_BIGINT}.0) AS INTEGER) END"
        ),
    }

    @classmethod
    def sql(cls, vendor: str, expression: str) -> str:
        return cls.TEMPLATES[vendor].replace("<x>", expression)

    def _bounded(self, vendor: str, compiler) -> tuple[str, tuple]:
        source, where = self.get_source_expressions()
        if where is not None:
            raise ValueError("BoundedSum takes no filter")
        inner, params = compiler.compile(source)
        return self.sql(vendor, inner), tuple(params) * self.TEMPLATES[vendor].count("<x>")

    def as_postgresql(self, compiler, connection, **extra_context):
        return self._bounded("postgresql", compiler)

    def as_sqlite(self, compiler, connection, **extra_context):
        return self._bounded("sqlite", compiler)


class JSONField(models.JSONField):
    """Django's JSONField, read with ``json_value`` (orjson, exact past 64 bits): ingest loads
    the JSON columns of every job and step a live batch touches, and the stdlib decoder was a
    tenth of that time."""

    def from_db_value(self, value, expression, connection):
        if isinstance(value, str) and self.decoder is None:
            return json_value(value)
        return super().from_db_value(value, expression, connection)


class JSONTextField(models.TextField):
    """JSON kept as text on every database, for a value always read whole and never queried
    into. PostgreSQL parses each jsonb value it is given and prints it back out on each read:
    that was most of the time to read a week's duration histograms, and a large part of a live
    batch's Job upsert and read (bench/README.md, "Live producers")."""

    def from_db_value(self, value, expression, connection):
        return value if value is None else json_value(value)

    def to_python(self, value):
        return json_value(value) if isinstance(value, str) else value

    def get_prep_value(self, value):
        return value if value is None else json_text(value)

    def value_to_string(self, obj):
        return self.value_from_object(obj)  # as JSONField: dumpdata writes the JSON itself

    # For django-stubs: the field's Python value is any JSON value, not text.
    _pyi_private_set_type: Any
    _pyi_private_get_type: Any


def today_utc() -> date:
    """Today's UTC date: a new job's ``partition_day``."""
    return timezone.now().date()


class UTCHour(Func):
    """The start of the UTC hour of a timestamp column (``hour_floor`` in SQL), as an expression
    each database accepts for a generated column (PostgreSQL wants it immutable: no session
    time zone in it)."""

    output_field = models.DateTimeField()

    def as_postgresql(self, compiler, connection, **extra):
        template = "timezone('UTC', date_trunc('hour', timezone('UTC', %(expressions)s)))"
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler, connection, **extra):
        # Django stores a datetime on SQLite as UTC text, "YYYY-MM-DD HH:MM:SS[.ffffff]". No
        # ", " in it: Django's SQLite introspection splits the CREATE TABLE text on it.
        template = "substr(%(expressions)s,1,13)||':00:00'"
        return self.as_sql(compiler, connection, template=template, **extra)


class JSONKeyText(Func):
    """One top-level key of a JSON object column, as text: a string as itself, a number or a
    boolean as JSON writes it (``42``, ``2.5``, ``true``); null when the key is missing or its
    value is null. (An object or array comes as JSON text, spaced as each database prints it.)

    The key is a query parameter, never part of the SQL, so any key reads the same: with dots,
    quotes or ``__`` in it. Django's key lookups split ``a__b`` into two keys, and SQLite's JSON
    paths cannot name a key holding a double quote, so SQLite reads the object's members with
    ``json_each`` and picks the one of that key."""

    output_field = models.TextField()

    def __init__(self, column: str, key: str):
        super().__init__(F(column))
        self.key = key

    def as_sql(
        self, compiler, connection, function=None, template=None, arg_joiner=None, **extra_context
    ):
        raise NotSupportedError(f"JSONKeyText has no SQL for {connection.vendor}")

    def as_postgresql(self, compiler, connection, **extra_context):
        column, params = compiler.compile(self.source_expressions[0])
        return f"({column} ->> %s::text)", (*params, self.key)

    def as_sqlite(self, compiler, connection, **extra_context):
        column, params = compiler.compile(self.source_expressions[0])
        sql = (
            "(SELECT CASE member.type WHEN 'text' THEN member.value WHEN 'true' THEN 'true' "
            "WHEN 'false' THEN 'false' WHEN 'null' THEN NULL ELSE CAST(member.value AS TEXT) END "
            f"FROM json_each({column}) AS member WHERE member.key = %s)"
        )
        return sql, (*params, self.key)


def hour_floor(value: datetime) -> datetime:
    """The UTC hour ``value`` lies in."""
    return value.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


class ByCodePoint(Collate):
    """A text expression compared by code point: PostgreSQL's "C" collation, SQLite's BINARY."""

    def __init__(self, expression):
        super().__init__(expression, "C")

    def as_sqlite(self, compiler, connection, **extra_context):
        return super().as_sql(
            compiler, connection, collation=connection.ops.quote_name("BINARY"), **extra_context
        )


@models.CharField.register_lookup
class AnyOf(In):
    """``field__any=values``: ``field IN (values)``, except on PostgreSQL, where it is ``field =
    ANY(%s)`` with the values as one array parameter. psycopg converts the placeholders of a
    statement with more than 50 parameters afresh each time (uncached), so a list of hundreds
    of job ids, as a live producer's request touches, is one parameter here, not hundreds."""

    lookup_name = "any"

    def as_postgresql(self, compiler, connection):
        if not self.rhs_is_direct_value():
            return super().as_sql(compiler, connection)
        lhs, lhs_params = self.process_lhs(compiler, connection)
        values = [value for value in dict.fromkeys(self.rhs) if value is not None]
        array = self.lhs.output_field.db_type(connection)
        return f"{lhs} = ANY(%s::{array}[])", (*lhs_params, values)
