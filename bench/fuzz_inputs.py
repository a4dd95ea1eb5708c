"""The hand-made hostile inputs of bench/fuzz.py: every URL x every kind of caller x hostile
text, bodies and headers (control characters, path tricks, markup, odd digits, deep nesting,
gzip tricks, odd Authorization values)."""

import gzip
import json
import sys
from urllib.parse import quote, urlencode

ROLES = ("anonymous", "norole", "operator", "support", "engineer", "staff", "token")
JOB_ID = "fuzz-job"
CSRF = "f" * 32

# Hostile text: control characters, path tricks, markup, odd digits, huge and odd numbers.
HOSTILE = [
    "",
    " ",
    "\n",
    "a\nb",
    "a\rb",
    "\x00",
    "a\x00b",
    "\t\x1b[31m",
    ".",
    "..",
    "../../etc/passwd",
    "%00",
    "%",
    "<script>alert(1)</script>",
    '<a href="https://evil.example">Re-login</a>',
    "' OR 1=1 --",
    "{{7*7}}",
    "${jndi:ldap://x}",
    "é",
    "\u202egnp.exe",
    "\ufeff",
    "\U0001f600",
    "٣",
    "\uff11\uff12",
    "-1",
    "0",
    "1e309",
    "NaN",
    "9" * 400,
    "9999-12-31T23:59:59-23:59",
    "9999-12-31T23:59:59+23:59",
    "0001-01-01T00:00:00+14:00",
    "2026-02-30",
    "x" * 5000,
]
# Raw path segments as an attacker types them (already encoded).
RAW_SEGMENTS = ["%00", "%0A", "%2e%2e", "%2F", "..%2F..", "%ED%A0%80", "%FF", "%C0%AE"]
QUERY_NAMES = [
    "show",
    "q",
    "status",
    "segment",
    "failure_code",
    "error_type",
    "provider",
    "model",
    "workflow",
    "since",
    "until",
    "retrying",
    "stalled",
    "has_findings",
    "min_attempts",
    "reason",
    "cursor",
    "range",
    "limit",
    "from",
    "more",
    "rows",
    "step",
    "assignee",
    "kind",
    "severity",
    "job",
]
PAGES = [
    "/",
    "/dashboard/",
    "/failures/",
    "/failures/{job}/",
    "/escalations/",
    "/escalations/{esc}/",
    "/jobs/{job}/",
    "/jobs/{job}/events.ndjson",
    "/jobs/{job}/events.json",
    "/api/v1/jobs",
    "/api/v1/jobs/{job}",
    "/api/v1/openapi.json",
    "/healthz",
    "/metrics",
    "/accounts/login/",
    "/admin/",
    "/admin/jobs/job/",
    "/admin/jobs/alertrule/",
]
CHUNKED = "chunked"
ODD_AUTHORIZATION = [
    "Bearer é",
    "Bearer \x7f",
    "Bearer " + "x" * 9000,
    "Basic Zm9vOmJhcg==",
    "Bearer",
    "Bearer  ",
    "Token abc",
]
ACTIONS = ["acknowledge", "resolve", "reopen", "unassign", "..", "x" * 300]
# Issue 34's causes of a 500, each as its request: session cookies with an escaped NUL (any
# page, the login page, the read API even with a token), escalation ids past any row (assign,
# bulk, detail), numbers past every row on the job page, and attempts out of bounds on types
# that do not use them.
ODD_COOKIES = [
    'sessionid="a\\000b"',
    'sessionid="abcdefgh\\000ijklmnop"',
    'sessionid="\\377\\376abcdefgh"',
    'csrftoken="a\\000b"',
]
COOKIE_PAGES = ["/", "/accounts/login/", "/api/v1/jobs", "/escalations/", "/jobs/{job}/"]
ODD_ROW_IDS = ["9" * 20, "9" * 5000, "²", "١٢"]
JOB_PAGE_QUERIES = [
    "more=steps&from=1e%2B30",
    f"more=steps&from={10**30}",
    f"more=waterfall&from={10**30}",
    f"more=narrative&from={10**30}",
    f"more=steps&from=0&to={'9' * 5000}",
    "more=steps&from=0&to=%C2%B2",
    f"rows={10**30}",
    "rows=1e%2B30",
    f"first={10**30}",
    "first=%C2%B2",
    "step=n1:%C2%B2",
    f"step=n1:{'9' * 5000}",
]
ODD_ATTEMPTS = [2**62, True, 0, "2"]


def auth_headers(role: str, world: dict) -> dict:
    if role == "token":
        return {"Authorization": f"Bearer {world['token']}"}
    if role == "anonymous":
        return {"Cookie": f"csrftoken={CSRF}", "X-CSRFToken": CSRF}
    session = world["sessions"][role]
    return {"Cookie": f"sessionid={session}; csrftoken={CSRF}", "X-CSRFToken": CSRF}


# --- hand-made hostile requests ------------------------------------------------------------------


def q(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def nested(depth: int, leaf: str = "1") -> str:
    return '{"a":' * depth + leaf + "}" * depth


def ingest_bodies() -> list[tuple[str, str, bytes, dict]]:
    """(label, content type, body, extra headers) for POST /api/v1/events."""

    def event(**fields) -> dict:
        return {"type": "job_started", "job_id": "fz-1", **fields}

    bodies = [
        ("deep nesting 5000", "application/json", nested_event(5000), {}),
        ("deep nesting 600", "application/json", nested_event(600), {}),
        (
            "deep array",
            "application/json",
            (
                '{"type":"job_started","job_id":"fz","payload":{"a":'
                + "[" * 3000
                + "]" * 3000
                + "}}"
            ).encode(),
            {},
        ),
        (
            "huge int",
            "application/json",
            b'{"type":"node_started","job_id":"fz","payload":{"node_id":"n","attempt":'
            + b"9" * 5000
            + b"}}",
            {},
        ),
        (
            "float attempt",
            "application/json",
            json.dumps(
                event(type="node_started", payload={"node_id": "n", "attempt": 1.5})
            ).encode(),
            {},
        ),
        ("not json", "application/json", b"{nope", {}),
        ("non utf-8", "application/json", b'{"type":"job_started","job_id":"\xff\xfe"}', {}),
        ("bom ndjson", "application/x-ndjson", "\ufeff" + json.dumps(event()) + "\n\n", {}),
        ("wrong content type", "text/plain", json.dumps(event()).encode(), {}),
        ("empty", "application/json", b"", {}),
        ("empty array", "application/json", b"[]", {}),
        ("null", "application/json", b"null", {}),
        ("payload list", "application/json", json.dumps(event(payload=[1])).encode(), {}),
        ("type int", "application/json", json.dumps({"type": 5, "job_id": "x"}).encode(), {}),
        (
            "gzip two members",
            "application/json",
            gzip.compress(b'[{"type":"job_started","job_id":"gz-a"}')
            + gzip.compress(b',{"type":"job_started","job_id":"gz-b"}]'),
            {"Content-Encoding": "gzip"},
        ),
        (
            "gzip bomb",
            "application/json",
            gzip.compress(b" " * (12 * 1024 * 1024)),
            {"Content-Encoding": "gzip"},
        ),
        ("bad gzip", "application/json", b"\x1f\x8bnot gzip", {"Content-Encoding": "gzip"}),
        ("unknown encoding", "application/json", b"[]", {"Content-Encoding": "br"}),
        (
            "batch over limit",
            "application/x-ndjson",
            b"\n".join([b'{"type":"x","job_id":"o"}'] * 10_001),
            {},
        ),
        (
            "chunked",
            "application/json",
            json.dumps([event()]).encode(),
            {"Transfer-Encoding": "chunked"},
        ),
        (
            "short content-length",
            "application/json",
            json.dumps([event()]).encode(),
            {"Content-Length": "5"},
        ),
    ]
    for value in HOSTILE:
        for field in ("job_id", "event_id", "ts", "type"):
            bodies.append(
                (
                    f"{field}={value[:20]!r}",
                    "application/json",
                    json.dumps(event(**{field: value})).encode(),
                    {},
                )
            )
        for field in ("node_id", "reason", "provider", "attempt", "step_index", "duration_ms"):
            payload = {"node_id": "n1", field: value}
            body = event(type="node_finished", payload=payload)
            bodies.append(
                (
                    f"payload.{field}={value[:20]!r}",
                    "application/json",
                    json.dumps(body).encode(),
                    {},
                )
            )
        bodies.append(
            (f"seq={value[:20]!r}", "application/json", json.dumps(event(seq=value)).encode(), {})
        )
    for event_type in ("job_started", "cancel_requested", "job_finished", "custom.thing"):
        for attempt in ODD_ATTEMPTS:
            body = event(type=event_type, payload={"attempt": attempt, "status": "completed"})
            bodies.append(
                (
                    f"{event_type} payload.attempt={attempt!r}",
                    "application/json",
                    json.dumps([event(job_id="fz-ok"), body]).encode(),
                    {},
                )
            )
    return bodies


def nested_event(depth: int) -> bytes:
    return ('{"type":"job_started","job_id":"fz-deep","payload":' + nested(depth) + "}").encode()


def otlp_bodies() -> list[tuple[str, str, bytes, dict]]:
    def span(**fields):
        base = {
            "traceId": "0af7651916cd43dd8448eb211c80319c",
            "spanId": "b7ad6b7169203331",
            "name": "s",
            "startTimeUnixNano": "1",
            "endTimeUnixNano": "2",
        }
        return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{**base, **fields}]}]}]})

    deep = {"key": "a", "value": {"kvlistValue": {"values": []}}}
    node = deep
    for _ in range(3000):
        child = {"key": "a", "value": {"kvlistValue": {"values": []}}}
        node["value"]["kvlistValue"]["values"].append(child)
        node = child
    bodies = [
        ("otlp deep attributes", "application/json", deep_json(span, deep), {}),
        *(
            (
                f"otlp {name} as JSON nested {depth} deep",
                "application/json",
                span(
                    spanId="b7ad6b7169203332",
                    parentSpanId="b7ad6b7169203331",
                    attributes=[{"key": name, "value": {"stringValue": nested(depth)}}],
                ).encode(),
                {},
            )
            for name in ("traceviz.payload_results", "traceviz.context", "input.value")
            for depth in (500, 5000)
        ),
        ("otlp not protobuf", "application/x-protobuf", b"\xff\x00garbage", {}),
        ("otlp not json", "application/json", b"{", {}),
        ("otlp empty", "application/json", b"{}", {}),
    ]
    for value in HOSTILE[:20]:
        for field in ("traceId", "spanId", "name", "startTimeUnixNano", "parentSpanId"):
            bodies.append(
                (
                    f"otlp {field}={value[:20]!r}",
                    "application/json",
                    span(**{field: value}).encode(),
                    {},
                )
            )
    return bodies


# Issue 34's causes, each as the request that reproduced it: numbers past the columns and
# sums, strings just past 200 characters, look-alike and 4-byte ids, a 12 KB resource.
BOUND_VALUES = (2**31, 2**63 - 1, "99999999999", "9" * 31, "9" * 5000, "\u00b2", -1)
BOUND_KEYS = (
    "traceviz.attempt",
    "traceviz.step_index",
    "traceviz.epoch",
    "traceviz.step_epoch",
    "celery.retries",
    "gen_ai.usage.input_tokens",
    "llm.token_count.completion",
)
LOOKALIKE_IDS = (
    "inv\u202egpj.exe",
    "job\u200b1",
    "\ufeffjob",
    "   ",
    "p\u0430ypal",
    "\U0001f600" * 200,
)


def _otlp_value(value) -> dict:
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return {"intValue": str(value)}
    return {"stringValue": str(value)}


def _otlp(*spans: dict, resource: dict | None = None) -> bytes:
    attributes = [{"key": k, "value": _otlp_value(v)} for k, v in (resource or {}).items()]
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": attributes},
                    "scopeSpans": [{"scope": {"name": "fuzz"}, "spans": list(spans)}],
                }
            ]
        }
    ).encode()


def _span(n: int, name: str = "s", parent: str = "", kind: int = 1, **attributes) -> dict:
    return {
        "traceId": "1af7651916cd43dd8448eb211c80319c",
        "spanId": f"{n:016x}",
        "parentSpanId": parent,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": "1772442000000000000",
        "endTimeUnixNano": "1772442000250000000",
        "attributes": [{"key": k, "value": _otlp_value(v)} for k, v in attributes.items()],
    }


def issue34_otlp_bodies() -> list[tuple[str, str, bytes, dict]]:
    """(label, content type, body, extra headers) for POST /v1/traces: issue 34's causes."""
    root = _span(1, "run")
    bodies = []
    for key in BOUND_KEYS:
        for value in BOUND_VALUES:
            extra = {"celery.task_name": "t.fetch"} if key == "celery.retries" else {}
            child = _span(2, "fetch", f"{1:016x}", 5 if extra else 1, **{key: value}, **extra)
            bodies.append(
                (f"otlp {key}={str(value)[:12]}", "application/json", _otlp(root, child), {})
            )
    long_name = "p" * 250
    chat = _span(
        2,
        "chat",
        f"{1:016x}",
        **{
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": long_name,
            "gen_ai.request.model": long_name,
            "gen_ai.usage.input_tokens": 10**12,
            "gen_ai.usage.output_tokens": 10**12,
        },
    )
    bodies.append(("otlp provider and model over 200", "application/json", _otlp(root, chat), {}))
    same = "n" * 200
    siblings = _otlp(root, _span(2, same, f"{1:016x}"), _span(3, same, f"{1:016x}"))
    bodies.append(("otlp two siblings of one 200-char name", "application/json", siblings, {}))
    for length in range(200, 211):
        text = "x" * length
        child = _span(
            2,
            text,
            f"{1:016x}",
            **{f"traceviz.{name}": text for name in ("node_id", "failure_code", "tool", "state")},
        )
        named = _span(1, text, **{"traceviz.job_id": "j" * length, "traceviz.workflow": text})
        bodies.append((f"otlp strings of {length}", "application/json", _otlp(named, child), {}))
    for value in LOOKALIKE_IDS:
        for key in ("traceviz.job_id", "traceviz.node_id"):
            child = _span(2, "fetch", f"{1:016x}", **{key: value})
            bodies.append((f"otlp {key}={value[:8]!r}", "application/json", _otlp(root, child), {}))
    resource = {f"k8s.pod.label{index}": "v" * 300 for index in range(40)}
    spans = [root, *(_span(n, f"s{n}", f"{1:016x}") for n in range(2, 60))]
    bodies.append(("otlp 12 KB resource", "application/json", _otlp(*spans, resource=resource), {}))
    return bodies


def issue34_event_bodies() -> list[tuple[str, str, bytes, dict]]:
    """(label, content type, body, extra headers) for POST /api/v1/events: issue 34's causes."""
    bodies = []
    for key in BOUND_KEYS:
        for value in BOUND_VALUES:
            span = {
                "type": "span",
                "job_id": "fz-span",
                "ts": "2026-03-02T09:00:00Z",
                "payload": {
                    "trace_id": "2af7651916cd43dd8448eb211c80319c",
                    "span_id": "00000000000000a2",
                    "end": "2026-03-02T09:00:01Z",
                    "status": {"code": "x" * 40},
                    "attributes": {key: value, "llm.input_messages.9999999999.message.role": "u"},
                },
            }
            body = json.dumps([span]).encode()
            bodies.append((f"span {key}={str(value)[:12]}", "application/json", body, {}))
    for value in LOOKALIKE_IDS:
        for field in ("job_id", "node_id"):
            item = {"type": "node_started", "job_id": "fz-ids", "payload": {"node_id": "n1"}}
            if field == "job_id":
                item["job_id"] = value
            else:
                item["payload"]["node_id"] = value
            body = json.dumps([item]).encode()
            bodies.append((f"{field}={value[:8]!r}", "application/json", body, {}))
    card = {"type": "job_started", "job_id": "fz-card", "payload": {"card": 4111111111111111}}
    bodies.append(("card number as a number", "application/json", json.dumps(card).encode(), {}))
    return bodies


def deep_json(span, attribute) -> bytes:
    sys.setrecursionlimit(20_000)
    try:
        return span(attributes=[attribute]).encode()
    finally:
        sys.setrecursionlimit(1000)


def hand_made(world: dict) -> list[tuple[str, str, str, bytes, dict, str]]:
    """(label, method, path, body, headers, role) for every URL x role x hostile input."""
    job, esc = q(JOB_ID), world["esc"]
    cases = []
    for role in ROLES:
        auth = auth_headers(role, world)
        for page in PAGES:
            path = page.replace("{job}", job).replace("{esc}", esc)
            cases.append((f"GET {page}", "GET", path, b"", auth, role))
            # Each parameter gets three hostile values (rotating), every value some parameter.
            for n, name in enumerate(QUERY_NAMES):
                for k in range(3):
                    value = HOSTILE[(n * 3 + k) % len(HOSTILE)]
                    query = urlencode({name: value.encode("utf-8", "surrogatepass")})
                    cases.append((f"GET {page}?{name}=", "GET", f"{path}?{query}", b"", auth, role))
            if "{job}" in page:
                for value in HOSTILE + RAW_SEGMENTS:
                    segment = value if value in RAW_SEGMENTS else q(value)
                    hostile = page.replace("{job}", segment).replace("{esc}", esc)
                    cases.append((f"GET {page} hostile id", "GET", hostile, b"", auth, role))
        for cookie in ODD_COOKIES:
            for page in COOKIE_PAGES:
                path = page.replace("{job}", job)
                header = {**auth, "Cookie": cookie}
                cases.append((f"GET {page} odd cookie", "GET", path, b"", header, role))
        for query in JOB_PAGE_QUERIES:
            for extra in ({}, {"HX-Request": "true"}):
                path = f"/jobs/{job}/?{query}"
                label = f"GET /jobs/<id>/?{query[:24]}"
                cases.append((label, "GET", path, b"", {**auth, **extra}, role))
        form = {**auth, "Content-Type": "application/x-www-form-urlencoded"}
        for raw_id in ODD_ROW_IDS:
            segment = q(raw_id)
            cases.append(
                ("GET /escalations/<odd id>/", "GET", f"/escalations/{segment}/", b"", auth, role)
            )
            for action in ("assign", "acknowledge"):
                path = f"/escalations/{segment}/{action}/"
                cases.append(
                    (f"POST /escalations/<odd id>/{action}/", "POST", path, b"", form, role)
                )
            data = urlencode({"assignee": raw_id}).encode()
            path = f"/escalations/{esc}/assign/"
            cases.append(("POST /escalations/<id>/assign/ odd id", "POST", path, data, form, role))
            data = urlencode(
                {"ids": [esc, raw_id], "action": "acknowledge", "confirm": "1"}, doseq=True
            ).encode()
            cases.append(
                ("POST /escalations/bulk/ odd id", "POST", "/escalations/bulk/", data, form, role)
            )
        for value in ODD_AUTHORIZATION:
            header = {**auth, "Authorization": value}
            for page in ("/metrics", "/api/v1/jobs", "/api/v1/events"):
                cases.append((f"GET {page} odd Authorization", "GET", page, b"", header, role))
        for label, content_type, body, extra in ingest_bodies():
            headers = {**auth, "Content-Type": content_type, **extra}
            cases.append(
                (f"POST /api/v1/events {label}", "POST", "/api/v1/events", body, headers, role)
            )
        for label, content_type, body, extra in otlp_bodies() + issue34_otlp_bodies():
            headers = {**auth, "Content-Type": content_type, **extra}
            cases.append((f"POST /v1/traces {label}", "POST", "/v1/traces", body, headers, role))
        for label, content_type, body, extra in issue34_event_bodies():
            headers = {**auth, "Content-Type": content_type, **extra}
            cases.append(
                (f"POST /api/v1/events {label}", "POST", "/api/v1/events", body, headers, role)
            )
        for query in ("step=~0123456789abcdef:1", "step=%7E" + "f" * 16 + ":1"):
            for extra in ({}, {"HX-Request": "true"}):
                path = f"/jobs/{job}/?{query}"
                cases.append(
                    ("GET /jobs/<id>/?step=~short", "GET", path, b"", {**auth, **extra}, role)
                )
        for value in HOSTILE:
            raw = value.encode("utf-8", "surrogatepass")
            for action in ACTIONS:
                data = urlencode({"note": raw, "next": raw, "return_query": raw}).encode()
                path = f"/escalations/{esc}/{q(action)}/"
                cases.append(
                    (f"POST /escalations/<id>/{action[:12]}/", "POST", path, data, form, role)
                )
            data = urlencode({"assignee": raw}).encode()
            cases.append(
                (
                    "POST /escalations/<id>/assign/",
                    "POST",
                    f"/escalations/{esc}/assign/",
                    data,
                    form,
                    role,
                )
            )
            for ids in (raw, f"{esc},{value}".encode("utf-8", "surrogatepass")):
                data = urlencode({"ids": ids, "action": "acknowledge", "confirm": raw}).encode()
                cases.append(
                    ("POST /escalations/bulk/", "POST", "/escalations/bulk/", data, form, role)
                )
            data = urlencode({"username": raw, "password": raw}).encode()
            cases.append(("POST /accounts/login/", "POST", "/accounts/login/", data, form, role))
            cases.append(("POST /admin/login/", "POST", "/admin/login/", data, form, role))
            cases.append(("POST /accounts/logout/", "POST", "/accounts/logout/", b"", form, role))
    return cases
