"""The OpenAPI 3 document of the JSON API, served at /api/v1/openapi.json."""

from jobs.replay.failures import RunStatus, Segment

ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_STATUS = "(" + "|".join(status.value for status in RunStatus) + ")"
# Empty items are skipped ("failed," is "failed"), so the pattern allows them too.
STATUS_LIST = f"^{_STATUS}?(,{_STATUS}?)*$"
# Ids and names: 1 to 200 characters, no NUL (text anywhere in an event may not hold one).
IDENT = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^\\x00]*$"}
OTLP_STATUS = {"$ref": "#/components/schemas/OtlpStatus"}


def _otlp(schema: dict, description: str) -> dict:
    """An OTLP/HTTP answer: encoded as the request was (JSON here, or binary protobuf)."""
    return {
        "description": description,
        "content": {
            "application/json": {"schema": schema},
            "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
        },
    }


_error_responses = {
    "401": _json(ERROR, "missing, invalid or revoked bearer token"),
    "503": _json(ERROR, "database unavailable; retry after the Retry-After header's seconds"),
}

OPENAPI_DOCUMENT = {
    "openapi": "3.0.3",
    "info": {
        "title": "traceviz API",
        "version": "1.0.0",
        "description": "Event ingest (contract v1) and read access to replayed job state.",
    },
    "servers": [{"url": "/"}],
    "security": [{"bearer": []}],
    "paths": {
        "/api/v1/events": {
            "post": {
                "operationId": "ingestEvents",
                "summary": "Send events: a JSON object, a JSON array, or NDJSON",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "oneOf": [
                                    {"$ref": "#/components/schemas/Event"},
                                    {
                                        "type": "array",
                                        "items": {"$ref": "#/components/schemas/Event"},
                                        "minItems": 1,
                                        "maxItems": 10000,
                                    },
                                ]
                            }
                        },
                        "application/x-ndjson": {"schema": {"type": "string"}},
                    },
                },
                "responses": {
                    "200": _json({"$ref": "#/components/schemas/IngestResult"}, "all stored"),
                    "207": _json({"$ref": "#/components/schemas/IngestResult"}, "some rejected"),
                    "400": _json(
                        {"oneOf": [{"$ref": "#/components/schemas/IngestResult"}, ERROR]},
                        "nothing stored: unreadable body or every event rejected",
                    ),
                    "413": _json(ERROR, "body over 10 MB or batch over 10,000 events"),
                    "415": _json(ERROR, "unsupported Content-Type or Content-Encoding"),
                    **_error_responses,
                },
            }
        },
        "/api/v1/jobs": {
            "get": {
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
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 500},
                    },
                    {
                        "name": "cursor",
                        "in": "query",
                        "description": "next_cursor of the previous page (opaque: any other "
                        "value is a 400)",
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["jobs", "next_cursor"],
                            "properties": {
                                "jobs": {
                                    "type": "array",
                                    "items": {"$ref": "#/components/schemas/JobSummary"},
                                },
                                "next_cursor": {"type": "string", "nullable": True},
                            },
                        },
                        "one page of jobs",
                    ),
                    "400": _json(ERROR, "bad filter, limit or cursor"),
                    **_error_responses,
                },
            }
        },
        "/api/v1/jobs/{job_id}": {
            "get": {
                "operationId": "getJob",
                "summary": "A job's replayed state, steps and escalations",
                "parameters": [
                    {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": _json({"$ref": "#/components/schemas/Job"}, "the job"),
                    "404": _json(ERROR, "no such job"),
                    **_error_responses,
                },
            }
        },
        "/v1/traces": {
            "post": {
                "operationId": "exportTraces",
                "summary": "OTLP/HTTP trace export: spans become node attempts (protobuf or JSON)",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/ExportTraceServiceRequest"}
                        },
                        "application/x-protobuf": {
                            "schema": {"type": "string", "format": "binary"}
                        },
                    },
                },
                "responses": {
                    "200": _otlp(
                        {"$ref": "#/components/schemas/ExportTraceServiceResponse"},
                        "accepted; partialSuccess counts the rejected spans",
                    ),
                    "400": _otlp(OTLP_STATUS, "the body does not decode"),
                    "401": _otlp(OTLP_STATUS, "missing, invalid or revoked bearer token"),
                    "405": _otlp(OTLP_STATUS, "not a POST"),
                    "413": _otlp(OTLP_STATUS, "body over 10 MB or over 10,000 events"),
                    "415": _otlp(OTLP_STATUS, "not application/x-protobuf or application/json"),
                    "429": _otlp(OTLP_STATUS, "over the token's rate limit; see Retry-After"),
                    "503": _otlp(OTLP_STATUS, "database unavailable; see Retry-After"),
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "health",
                "security": [],
                "responses": {
                    "200": _json({"$ref": "#/components/schemas/Health"}, "healthy"),
                    "503": _json({"$ref": "#/components/schemas/Health"}, "database unreachable"),
                },
            }
        },
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {"type": "string"}},
            },
            "Health": {
                "type": "object",
                "required": ["status"],
                "properties": {"status": {"type": "string"}, "database": {"type": "string"}},
            },
            "ExportTraceServiceRequest": {
                "type": "object",
                "description": "OTLP/JSON: ids are hex strings, times nanoseconds as strings",
                "properties": {
                    # null reads as no spans (proto3 JSON mapping)
                    "resourceSpans": {
                        "type": "array",
                        "items": {"type": "object"},
                        "nullable": True,
                    },
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
            "OtlpStatus": {
                "type": "object",
                "description": "google.rpc.Status",
                "properties": {
                    "code": {"type": "integer"},
                    "message": {"type": "string"},
                    "details": {"type": "array", "items": {"type": "object"}},
                },
            },
            "Event": {
                "type": "object",
                "required": ["type", "job_id"],
                "properties": {
                    "type": IDENT,
                    "job_id": IDENT,
                    "event_id": IDENT,
                    "ts": {"type": "string", "format": "date-time"},
                    "seq": {"type": "integer", "minimum": 0},
                    "payload": {"type": "object", "additionalProperties": True},
                },
                "additionalProperties": False,
            },
            "ItemError": {
                "type": "object",
                "required": ["index", "errors"],
                "properties": {
                    "index": {"type": "integer"},
                    "errors": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["field", "message"],
                            "properties": {
                                "field": {"type": "string"},
                                "message": {"type": "string"},
                            },
                        },
                    },
                },
            },
            "IngestResult": {
                "type": "object",
                "required": ["received", "stored", "duplicates", "rejected", "errors"],
                "properties": {
                    "received": {"type": "integer"},
                    "stored": {"type": "integer"},
                    "duplicates": {"type": "integer"},
                    "rejected": {"type": "integer"},
                    "errors": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/ItemError"},
                    },
                },
            },
            "JobSummary": {
                "type": "object",
                "required": ["job_id", "status", "stalled"],
                "properties": {
                    "job_id": {"type": "string"},
                    "status": {"type": "string", "enum": [s.value for s in RunStatus]},
                    "stalled": {"type": "boolean"},
                    "name": {"type": "string"},
                    "workflow": {"type": "string"},
                    "provider": {"type": "string"},
                    "model": {"type": "string"},
                    "correlation_id": {"type": "string"},
                    "session_id": {"type": "string"},
                    "retry_of": {"type": "string", "nullable": True},
                    "started_at": {"type": "string", "format": "date-time", "nullable": True},
                    "finished_at": {"type": "string", "format": "date-time", "nullable": True},
                    "failing_node_id": {"type": "string", "nullable": True},
                    "failing_reason": {"type": "string", "nullable": True},
                    "failure_code": {"type": "string", "nullable": True},
                    "error_type": {"type": "string", "nullable": True},
                },
            },
            "Step": {
                "type": "object",
                "required": [
                    "node_id",
                    "attempt",
                    "result_type",
                    "segment",
                    "reason",
                    "ignored_stale",
                    "compensated",
                ],
                "properties": {
                    "node_id": {"type": "string"},
                    "attempt": {"type": "integer"},
                    "result_type": {"type": "string", "nullable": True},
                    "segment": {"type": "string", "enum": [s.value for s in Segment]},
                    "reason": {"type": "string"},
                    "ignored_stale": {"type": "boolean"},
                    "compensated": {"type": "boolean"},
                    "failure_code": {"type": "string"},
                    "error_type": {"type": "string"},
                    "state": {"type": "string"},
                    "step_index": {"type": "integer", "nullable": True},
                    "duration_ms": {"type": "number", "nullable": True},
                    "started_at": {"type": "string", "format": "date-time", "nullable": True},
                    "finished_at": {"type": "string", "format": "date-time", "nullable": True},
                    "trace_span_id": {"type": "string"},
                    "parent_span_id": {"type": "string"},
                    "payload_results": {"type": "object", "additionalProperties": True},
                },
            },
            "Job": {
                "allOf": [
                    {"$ref": "#/components/schemas/JobSummary"},
                    {
                        "type": "object",
                        "required": [
                            "completed_node_ids",
                            "cursor_node",
                            "payload_results",
                            "steps",
                            "escalations",
                        ],
                        "properties": {
                            "completed_node_ids": {"type": "array", "items": {"type": "string"}},
                            "cursor_node": {"type": "string", "nullable": True},
                            "payload_results": {"type": "object", "additionalProperties": True},
                            "last_validation_error": {"type": "object", "nullable": True},
                            "findings": {"type": "array", "items": {"type": "object"}},
                            "steps": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/Step"},
                            },
                            "escalations": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["id", "kind", "status", "node_id"],
                                    "properties": {
                                        "id": {"type": "integer"},
                                        "kind": {"type": "string"},
                                        "status": {"type": "string"},
                                        "severity": {"type": "string"},
                                        "node_id": {"type": "string"},
                                        "message": {"type": "string"},
                                    },
                                },
                            },
                        },
                    },
                ]
            },
        },
    },
}
