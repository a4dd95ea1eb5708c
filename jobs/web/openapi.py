"""The OpenAPI 3.1 document of the JSON API, served at /api/v1/openapi.json.

Built when asked, from the objects that do the work, so it cannot drift from them: response
schemas from the pydantic models the views serialise through (``jobs.web.schemas``), the event
schema from the contract's own tables (``jobs.contract.schema``), and the limits it states from
settings. OpenAPI 3.1 because its schemas are JSON Schema 2020-12, which pydantic writes (null
is a type there, not 3.0's ``nullable``). Only the OTLP bodies are described by hand: they are
protobuf messages, whose JSON mapping the OTLP specification defines.
"""

import copy
from functools import cache
from typing import Any

from django.conf import settings
from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from jobs.contract.schema import event_schema
from jobs.replay.failures import RunStatus
from jobs.web import compare_schemas, filters, schemas

OPENAPI_VERSION = "3.1.0"
REF_TEMPLATE = "#/components/schemas/{model}"

_STATUS = "(" + "|".join(status.value for status in RunStatus) + ")"
# Empty items are skipped ("failed," is "failed"), so the pattern allows them too.
STATUS_LIST = f"^{_STATUS}?(,{_STATUS}?)*$"
# A non-empty key before the first colon; no NUL anywhere (PostgreSQL text cannot hold one).
META_ITEM = r"^[^:\u0000]*[^:\s\u0000][^:\u0000]*:[^\u0000]*$"


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF_TEMPLATE.format(model=name)}


ERROR = ref("Error")
OTLP_STATUS = ref("OtlpStatus")


class _ResponseSchemas(GenerateJsonSchema):
    """Pydantic's JSON Schema without per-field titles ("Job Id"), which only repeat the
    property names."""

    def field_title_should_be_set(self, schema) -> bool:
        return False


def model_schemas() -> dict[str, Any]:
    """The component schemas of every response body, nested models included, by class name."""
    return copy.deepcopy(_model_schemas())


# The bodies the document describes, in the order its components list them.
RESPONSE_BODIES: tuple[type[schemas.Body], ...] = (
    schemas.JobPage,
    schemas.Job,
    compare_schemas.Comparison,
    schemas.IngestResult,
    schemas.Error,
    schemas.Health,
)


@cache  # the models cannot change while the process runs, and generating is not free
def _model_schemas() -> dict[str, Any]:
    _, top = models_json_schema(
        [(body, "serialization") for body in RESPONSE_BODIES],
        ref_template=REF_TEMPLATE,
        schema_generator=_ResponseSchemas,
    )
    return top["$defs"]


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _otlp(schema: dict, description: str) -> dict:
    """An OTLP/HTTP answer: encoded as the request was (JSON here, or binary protobuf)."""
    return {
        "description": description,
        "content": {
            "application/json": {"schema": schema},
            "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
        },
    }


def _too_large() -> str:
    return (
        f"body over {settings.TRACEVIZ_MAX_BODY_BYTES:,} bytes (after decompression) "
        f"or over {settings.TRACEVIZ_MAX_BATCH_EVENTS:,} events"
    )


def _ingest_events() -> dict:
    max_events = settings.TRACEVIZ_MAX_BATCH_EVENTS
    return {
        "operationId": "ingestEvents",
        "summary": "Send events: a JSON object, a JSON array, or NDJSON",
        "description": f"At most {settings.TRACEVIZ_MAX_BODY_BYTES:,} bytes and {max_events:,} "
        "events per request; gzip or deflate Content-Encoding accepted.",
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "oneOf": [
                            ref("Event"),
                            {
                                "type": "array",
                                "items": ref("Event"),
                                "minItems": 1,
                                "maxItems": max_events,
                            },
                        ]
                    }
                },
                "application/x-ndjson": {
                    "schema": {"type": "string", "description": "one Event per line"}
                },
            },
        },
        "responses": {
            "200": _json(ref("IngestResult"), "all stored"),
            "207": _json(ref("IngestResult"), "some rejected"),
            "400": _json(
                {"oneOf": [ref("IngestResult"), ERROR]},
                "nothing stored: unreadable body or every event rejected",
            ),
            "401": _json(ERROR, "missing, invalid or revoked bearer token"),
            "413": _json(ERROR, _too_large()),
            "415": _json(ERROR, "unsupported Content-Type or Content-Encoding"),
            "429": _json(ERROR, "over the token's rate limit; retry after Retry-After seconds"),
            "503": _json(ERROR, "database unavailable; retry after Retry-After seconds"),
        },
    }


def _list_jobs() -> dict:
    return {
        "operationId": "listJobs",
        "summary": "Jobs, newest first, keyset paginated",
        "parameters": [
            {
                "name": "status",
                "in": "query",
                "description": "comma-separated run statuses",
                "schema": {"type": "string", "pattern": STATUS_LIST},
            },
            {
                "name": "meta",
                "in": "query",
                "description": "key:value, split at the first colon (spaces around each side "
                "ignored): jobs whose metadata holds the value at that top-level key, compared "
                "as text (a number or boolean as JSON writes it: 42, true). Repeat for AND.",
                "style": "form",
                "explode": True,
                "schema": {
                    "type": "array",
                    "maxItems": filters.MAX_META_FILTERS,
                    "items": {
                        "type": "string",
                        "pattern": META_ITEM,
                        "maxLength": filters.MAX_META_CHARS,
                    },
                },
            },
            {
                "name": "limit",
                "in": "query",
                "schema": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": settings.TRACEVIZ_API_MAX_PAGE_SIZE,
                    "default": schemas.DEFAULT_PAGE_SIZE,
                },
            },
            {
                "name": "cursor",
                "in": "query",
                "description": "next_cursor of the previous page (opaque: any other value is "
                "a 400)",
                "schema": {"type": "string"},
            },
        ],
        "responses": {
            "200": _json(ref("JobPage"), "one page of jobs"),
            "400": _json(ERROR, "bad filter (status, meta), limit or cursor"),
            "401": _json(ERROR, "missing, invalid or revoked bearer token"),
            "403": _json(ERROR, "signed in, but the account holds no role"),
            "503": _json(ERROR, "database unavailable; retry after Retry-After seconds"),
        },
    }


def _get_job() -> dict:
    return {
        "operationId": "getJob",
        "summary": "A job's replayed state, steps and escalations",
        "parameters": [
            {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
        "responses": {
            "200": _json(ref("Job"), "the job"),
            "307": {
                "description": "the id is a trace id whose trace named its job "
                "(traceviz.job_id): Location is that job's URL",
                "headers": {"Location": {"schema": {"type": "string"}}},
            },
            "404": _json(ERROR, "no such job"),
            "401": _json(ERROR, "missing, invalid or revoked bearer token"),
            "403": _json(ERROR, "signed in, but the account holds no role"),
            "503": _json(ERROR, "database unavailable; retry after Retry-After seconds"),
        },
    }


def _compare_runs() -> dict:
    return {
        "operationId": "compareRuns",
        "summary": "Two runs node by node: the first divergence and every difference",
        "description": "Job ids travel in the query string (they may contain slashes). Without "
        "b, b is the latest run of a's workflow that started before a and completed, else the "
        "latest that started before it; b_picked says which.",
        "parameters": [
            {
                "name": "a",
                "in": "query",
                "required": True,
                "description": "the job looked into",
                "schema": {"type": "string", "minLength": 1},
            },
            {
                "name": "b",
                "in": "query",
                "description": "the job set against it (default: picked, see above)",
                "schema": {"type": "string"},
            },
        ],
        "responses": {
            "200": _json(ref("Comparison"), "the comparison"),
            "400": _json(ERROR, "a is missing"),
            "404": _json(ERROR, "no such job, or no earlier run of a's workflow to pick"),
            "401": _json(ERROR, "missing, invalid or revoked bearer token"),
            "403": _json(ERROR, "signed in, but the account holds no role"),
            "503": _json(ERROR, "database unavailable; retry after Retry-After seconds"),
        },
    }


def _export_traces() -> dict:
    return _otlp_export(
        "exportTraces",
        "OTLP/HTTP trace export: spans become node attempts (protobuf or JSON)",
        "ExportTraceService",
        "accepted; partialSuccess counts the rejected spans",
    )


def _export_logs() -> dict:
    return _otlp_export(
        "exportLogs",
        "OTLP/HTTP log export: records join their span's call or step (protobuf or JSON)",
        "ExportLogsService",
        "accepted; partialSuccess counts the rejected log records",
    )


def _otlp_export(operation: str, summary: str, service: str, accepted: str) -> dict:
    return {
        "operationId": operation,
        "summary": summary,
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": ref(f"{service}Request")},
                "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
            },
        },
        "responses": {
            "200": _otlp(ref(f"{service}Response"), accepted),
            "400": _otlp(OTLP_STATUS, "the body does not decode"),
            "401": _otlp(OTLP_STATUS, "missing, invalid or revoked bearer token"),
            "405": _otlp(OTLP_STATUS, "not a POST"),
            "413": _otlp(OTLP_STATUS, _too_large()),
            "415": _otlp(OTLP_STATUS, "not application/x-protobuf or application/json"),
            "429": _otlp(OTLP_STATUS, "over the token's rate limit; see Retry-After"),
            "503": _otlp(OTLP_STATUS, "database unavailable; see Retry-After"),
        },
    }


# OTLP/HTTP bodies: the JSON mapping of the protobuf messages, as far as clients need it.
OTLP_SCHEMAS = {
    "ExportTraceServiceRequest": {
        "type": "object",
        "description": "OTLP/JSON: ids are hex strings, times nanoseconds as strings",
        "properties": {
            # null reads as no spans (proto3 JSON mapping)
            "resourceSpans": {"type": ["array", "null"], "items": {"type": "object"}},
        },
    },
    "ExportTraceServiceResponse": {
        "type": "object",
        "properties": {
            "partialSuccess": {
                "type": "object",
                "properties": {
                    "rejectedSpans": {"type": "string", "description": "int64 as text"},
                    "errorMessage": {"type": "string"},
                },
            }
        },
    },
    "ExportLogsServiceRequest": {
        "type": "object",
        "description": "OTLP/JSON: ids are hex strings, times nanoseconds as strings",
        "properties": {
            "resourceLogs": {"type": ["array", "null"], "items": {"type": "object"}},
        },
    },
    "ExportLogsServiceResponse": {
        "type": "object",
        "properties": {
            "partialSuccess": {
                "type": "object",
                "properties": {
                    "rejectedLogRecords": {"type": "string", "description": "int64 as text"},
                    "errorMessage": {"type": "string"},
                },
            }
        },
    },
    "OtlpStatus": {
        "type": "object",
        "description": "google.rpc.Status",
        "properties": {
            "code": {"type": "integer"},
            "message": {"type": "string"},
            "details": {"type": "array", "items": {"type": "object"}},
        },
    },
}


def openapi_document() -> dict[str, Any]:
    """The whole document, built from the current settings (a fresh dict on every call)."""
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "traceviz API",
            "version": "1.0.0",
            "description": "Event ingest (contract v1) and read access to replayed job state.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/events": {"post": _ingest_events()},
            "/api/v1/jobs": {"get": _list_jobs()},
            "/api/v1/jobs/{job_id}": {"get": _get_job()},
            "/api/v1/compare": {"get": _compare_runs()},
            "/v1/traces": {"post": _export_traces()},
            "/v1/logs": {"post": _export_logs()},
            "/healthz": {
                "get": {
                    "operationId": "health",
                    "security": [],
                    "responses": {
                        "200": _json(ref("Health"), "healthy"),
                        "503": _json(ref("Health"), "database unreachable"),
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                **model_schemas(),
                "Event": event_schema(),
                **copy.deepcopy(OTLP_SCHEMAS),
            },
        },
    }
