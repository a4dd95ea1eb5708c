"""One maximum batch (TRACEVIZ_MAX_BATCH_EVENTS events, 10,000 by default) per request: how long
the request takes, against the worker timeout deploy/gunicorn.conf.py sets.

Starts gunicorn with deploy/gunicorn.conf.py (bound to --port) on the database DATABASE_URL
names, creates an ingest token, and posts maximum batches of several shapes, each to new jobs:
many small jobs, a few long jobs, one job, long free text (a body near the 10 MiB limit), and
10,000 OTLP spans to /v1/traces. Prints seconds per request, the slowest, the machine's load
and the configured timeout.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_bench \\
        .venv/bin/python bench/max_batch.py --port 8216
"""

import argparse
import json
import os
import random
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ingest import job_events, manage
from load import start_gunicorn, stop_process

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "deploy" / "gunicorn.conf.py"
LONG_REASON = (
    "upstream answered 502 Bad Gateway after 30 s; retry scheduled with backoff. "
    "Authorization header was present, payload 4 KiB, see trace for details. "
) * 12  # 10,000 events with this in every node_finished: a body near the 10 MiB limit


def shape_events(shape: str, events: int, seed: int) -> list[dict]:
    """``events`` events of one shape, for jobs no earlier run of the bench used."""
    rng = random.Random(seed)
    start = datetime.now(UTC) - timedelta(minutes=30)
    jobs = {"small-jobs": events // 10, "long-jobs": 10, "one-job": 1, "long-text": events // 10}
    count = jobs[shape]
    stream: list[dict] = []
    for n in range(count):
        job_id = f"max-{shape}-{seed}-{n}"
        if count >= events // 10:
            stream.extend(job_events(job_id, start, rng))
            continue
        # Long jobs: one job_started, then node attempts until the share of events is used.
        per_job = events // count
        stream.append({"type": "job_started", "job_id": job_id, "payload": {"name": job_id}})
        moment = start
        for index in range((per_job - 1) // 2):
            moment += timedelta(milliseconds=rng.randint(1, 50))
            node = f"node-{index}"
            stream.append(
                {
                    "type": "node_started",
                    "job_id": job_id,
                    "ts": moment.isoformat(),
                    "payload": {"node_id": node, "step_index": index},
                }
            )
            stream.append(
                {
                    "type": "node_finished",
                    "job_id": job_id,
                    "ts": (moment + timedelta(milliseconds=5)).isoformat(),
                    "payload": {"node_id": node, "step_index": index, "result_type": "success"},
                }
            )
    if shape == "long-text":
        for item in stream:
            if item["type"] == "node_finished":
                item["payload"]["reason"] = LONG_REASON
    return stream[:events]


def otlp_body(spans: int, seed: int) -> bytes:
    """One OTLP/protobuf export request of ``spans`` spans: traces of a root and nine children
    (LLM calls with prompts and token counts, one in ten failing), each trace its own job."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    def attrs(**pairs) -> list:
        return [
            KeyValue(
                key=key.replace("__", "."),
                value=AnyValue(int_value=v) if isinstance(v, int) else AnyValue(string_value=v),
            )
            for key, v in pairs.items()
        ]

    rng = random.Random(seed)
    start = int((time.time() - 1800) * 1e9)
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for trace in range(spans // 10):
        trace_id = rng.randbytes(16)
        root_id = rng.randbytes(8)
        job = attrs(traceviz__job_id=f"max-otlp-{seed}-{trace}")
        scope.spans.append(
            Span(
                trace_id=trace_id,
                span_id=root_id,
                name="run",
                start_time_unix_nano=start,
                end_time_unix_nano=start + 9_000_000_000,
                attributes=job,
            )
        )
        for child in range(9):
            failed = rng.random() < 0.1
            scope.spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=rng.randbytes(8),
                    parent_span_id=root_id,
                    name="ChatOpenAI",
                    start_time_unix_nano=start + child * 1_000_000_000,
                    end_time_unix_nano=start + child * 1_000_000_000 + 500_000_000,
                    status=Status(code=Status.StatusCode.STATUS_CODE_ERROR, message=LONG_REASON)
                    if failed
                    else None,
                    attributes=attrs(
                        openinference__span__kind="LLM",
                        llm__provider="openai",
                        llm__model_name="gpt-4.1",
                        llm__token_count__prompt=1000,
                        llm__token_count__completion=200,
                        input__value=f"step {child}: plan the release " * 10,
                        output__value="1. build 2. upload 3. announce " * 10,
                    ),
                )
            )
    return request.SerializeToString()


def post(
    url: str,
    token: str,
    body: bytes,
    path: str = "/api/v1/events",
    kind: str = "application/x-ndjson",
) -> tuple[int, float, dict]:
    request = urllib.request.Request(
        url + path,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": kind},
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            raw = response.read()
            status = response.status
            answer = json.loads(raw) if kind.endswith("ndjson") else {"stored": "(OTLP)"}
    except urllib.error.HTTPError as error:
        status, answer = error.code, {"error": error.read()[:300].decode(errors="replace")}
    return status, time.perf_counter() - started, answer


def start_server(port: int) -> tuple[subprocess.Popen, str]:
    return start_gunicorn(
        os.environ["DATABASE_URL"], port, 2, {"GUNICORN_ACCESSLOG": ""}, config=CONFIG
    )


def configured_timeout() -> int:
    namespace: dict = {"__file__": str(CONFIG)}
    exec(compile(CONFIG.read_text(), str(CONFIG), "exec"), namespace)
    return namespace["timeout"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=None, help="default: the setting")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--shapes", default="small-jobs,long-jobs,one-job,long-text,otlp", help="comma-separated"
    )
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    events = args.events or int(os.environ.get("TRACEVIZ_MAX_BATCH_EVENTS", 10_000))
    manage("migrate", "--noinput")
    token = manage("create_ingest_token", f"max-batch-{args.seed}").strip().splitlines()[-1]
    server, url = start_server(args.port)
    timeout = configured_timeout()
    slowest = 0.0
    try:
        for round_index in range(args.rounds):
            for shape in args.shapes.split(","):
                seed = args.seed * 100 + round_index
                if shape == "otlp":
                    body = otlp_body(events, seed)
                    count = events
                    status, seconds, answer = post(
                        url, token, body, "/v1/traces", "application/x-protobuf"
                    )
                else:
                    items = shape_events(shape, events, seed)
                    body = "\n".join(json.dumps(item) for item in items).encode()
                    count = len(items)
                    status, seconds, answer = post(url, token, body)
                slowest = max(slowest, seconds)
                print(
                    f"round {round_index + 1} {shape:<10} {count:>6} events "
                    f"{len(body) / 1e6:5.1f} MB: HTTP {status} in {seconds:5.1f} s "
                    f"(stored {answer.get('stored', '-')}) load {os.getloadavg()[0]:.1f}"
                )
    finally:
        stop_process(server)
    print(
        f"slowest maximum batch: {slowest:.1f} s on {os.cpu_count()} cores; "
        f"deploy/gunicorn.conf.py timeout: {timeout} s ({timeout / slowest:.1f}x the slowest)"
    )


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")
    main()
