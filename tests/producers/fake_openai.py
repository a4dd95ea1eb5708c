"""A fake OpenAI-compatible chat completions API for the producer scripts: a local HTTP server
on 127.0.0.1 (no network, no real LLM), standard library only, so that a producer's own
environment needs nothing from traceviz's.

The conversation is scripted: ``replies`` maps the number of the request (0, 1...) to the
assistant's reply, either text, a tool call, or an HTTP error (``status``: OpenAI's error body
with that status, as an upstream failure answers); past the end of the script, the last reply
again. A request with ``"stream": true`` is answered as Server-Sent Events, chunk by chunk, the
way OpenAI streams (the usage in a last chunk when the request asks for it with
``stream_options.include_usage``); any other request in one JSON body. Every request body
received is kept in ``requests``, and the status answered in ``statuses``.
"""

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gpt-4o-mini-2024-07-18"


@dataclass(frozen=True)
class ToolCall:
    """An assistant reply that calls ``name`` with ``arguments`` (a JSON object)."""

    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """One scripted answer: ``text`` or a ``tool_call``, with its token usage; or, with a
    ``status`` other than 200, that HTTP error."""

    text: str = ""
    tool_call: ToolCall | None = None
    prompt_tokens: int = 100
    completion_tokens: int = 10
    status: int = 200


ERROR_BODY = {
    "error": {
        "message": "fake upstream failure",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}


@dataclass
class FakeOpenAI:
    """The server: ``start()`` it, point a client at ``base_url``, ``stop()`` it."""

    replies: list[Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)

    def start(self) -> "FakeOpenAI":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append(body)
                index = min(len(fake.requests) - 1, len(fake.replies) - 1)
                reply = fake.replies[index]
                fake.statuses.append(reply.status)
                if reply.status != 200:
                    self._send_json(ERROR_BODY, reply.status)
                elif body.get("stream"):
                    usage = (body.get("stream_options") or {}).get("include_usage", False)
                    self._send_events(reply, usage)
                else:
                    self._send_json(completion(reply))

            def _send_json(self, document: dict[str, Any], status: int = 200) -> None:
                data = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_events(self, reply: Reply, usage: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for chunk in chunks(reply, usage):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, format, *args):  # quiet: the producer's output is its report
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _usage(reply: Reply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def _tool_calls(call: ToolCall) -> list[dict[str, Any]]:
    function = {"name": call.name, "arguments": json.dumps(call.arguments)}
    return [{"index": 0, "id": call.call_id, "type": "function", "function": function}]


def completion(reply: Reply) -> dict[str, Any]:
    """The reply as one chat.completion body."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_call is not None:
        message["tool_calls"] = [
            {k: v for k, v in call.items() if k != "index"} for call in _tool_calls(reply.tool_call)
        ]
    finish = "tool_calls" if reply.tool_call is not None else "stop"
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": _usage(reply),
    }


def chunks(reply: Reply, usage: bool) -> list[dict[str, Any]]:
    """The reply as chat.completion.chunk objects: the role, the text in two pieces or the tool
    call, the finish reason, and (``usage``) a last chunk with no choices and the usage."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [choice],
        }

    out = [chunk({"role": "assistant", "content": ""})]
    if reply.tool_call is not None:
        out.append(chunk({"tool_calls": _tool_calls(reply.tool_call)}))
        out.append(chunk({}, "tool_calls"))
    else:
        half = len(reply.text) // 2
        out += [chunk({"content": reply.text[:half]}), chunk({"content": reply.text[half:]})]
        out.append(chunk({}, "stop"))
    if usage:
        out.append(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": MODEL,
                "choices": [],
                "usage": _usage(reply),
            }
        )
    return out
