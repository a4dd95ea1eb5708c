"""The OpenAPI 3 document of the JSON API, served at /api/v1/openapi.json."""

from jobs.failures import RunStatus, Segment

ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


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
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 500},
                    },
                    {"name": "cursor", "in": "query", "schema": {"type": "string"}},
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
            "Event": {
                "type": "object",
                "required": ["type", "job_id"],
                "properties": {
                    "type": {"type": "string", "minLength": 1, "maxLength": 200},
                    "job_id": {"type": "string", "minLength": 1, "maxLength": 200},
                    "event_id": {"type": "string", "minLength": 1, "maxLength": 200},
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
                ],  # fmt: skip
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
                        ],  # fmt: skip
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
