"""A small hostile OpenAI-compatible server (threads, stdlib only) for the kill -9, lock and
secrets tests.

* it echoes the request's ``Authorization`` header into a response header (``X-Echo-Auth``),
  the ``/v1/models`` body and the ``/version`` string, as a careless proxy might;
* it writes JSON with spaces (``"text": "tok"``), as some servers do;
* every token is delayed by ``token_delay_s``, so a run lasts long enough to be killed.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    server: HostileServer  # type: ignore[assignment]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _json(self, obj: object, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Echo-Auth", self.headers.get("Authorization", ""))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        if self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": "m", "owned_by": f"echo {auth}"}]})
        elif self.path == "/version":
            self._json({"version": f"1.0 (you sent {auth})"})
        else:
            self._json({"error": "not found"}, 404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.num_posts += 1
        n = int(body.get("max_tokens", 4))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("X-Echo-Auth", self.headers.get("Authorization", ""))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for i in range(n):
                time.sleep(self.server.token_delay_s)
                finish = "length" if i == n - 1 else None
                event = {"choices": [{"index": 0, "text": f"tok{i} ", "finish_reason": finish}]}
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()
            usage = {
                "choices": [],
                "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": n + 8},
            }
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.server.num_disconnects += 1


class HostileServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, token_delay_s: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.token_delay_s = token_delay_s
        self.num_posts = 0
        self.num_disconnects = 0
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
