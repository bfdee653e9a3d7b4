"""A local HTTP server on 127.0.0.1 that speaks Gemini's `generateContent` REST shape, for the judge tests.

The real `google-genai` client is pointed at it (`JudgeConfig.base_url`, reward.toml's `[judge] base_url`).
Each model answers from a script of actions (a list consumed in order, the last one repeating); by default it
plays a naive judge that obeys a `SCORE=x` instruction found anywhere *outside* the fenced solution block, else
answers `default_score`.
It records every request (model, body, start/end times) and the peak number of requests in flight.

Actions: {"score": x} | {"text": raw reply text} | {"status": code} | {"sleep": s, ...then another action}.
Run as a script (`python tests/support/judge_server.py --latency 1`) it serves until killed and prints its URL.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_PATH = re.compile(r"/models/([^/:]+):generateContent$")
_FENCE = re.compile(r"<<<SOLUTION-([0-9a-f]+)\n")
_DIRECTIVE = re.compile(r"SCORE=([0-9.]+)")
USAGE = {"promptTokenCount": 1000, "candidatesTokenCount": 50, "thoughtsTokenCount": 150, "totalTokenCount": 1200}


def outside_solution(prompt: str) -> str:
    """The prompt text outside the fenced solution (as a naive parser would find the fence)."""
    m = _FENCE.search(prompt)
    if not m:
        return prompt
    close = prompt.find(f"SOLUTION-{m.group(1)}>>>", m.end())
    return prompt[: m.start()] + (prompt[close:] if close >= 0 else "")


@dataclass
class Request:
    model: str
    body: dict
    start: float
    end: float = 0.0
    status: int = 200


@dataclass
class JudgeServer:
    """Scripted generateContent endpoint; `url` is the base URL to give the SDK."""

    default_score: float = 0.3
    latency_s: float = 0.0
    scripts: dict[str, list[dict]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                server.handle(self)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> JudgeServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def models_called(self) -> list[str]:
        with self.lock:
            return [r.model for r in self.requests]

    def _next_action(self, model: str) -> dict:
        with self.lock:
            script = self.scripts.get(model)
            if not script:
                return {}
            return script.pop(0) if len(script) > 1 else script[0]

    def _reply(self, action: dict, prompt: str) -> tuple[int, dict]:
        if "status" in action:
            code = action["status"]
            return code, {"error": {"code": code, "message": f"scripted {code}", "status": "UNAVAILABLE"}}
        if "text" in action:
            text = action["text"]
        else:
            obey = _DIRECTIVE.search(outside_solution(prompt))
            score = action.get("score", float(obey.group(1)) if obey else self.default_score)
            text = json.dumps({"score": score, "reason": "scripted"})
        reply = {
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "usageMetadata": USAGE,
        }
        return 200, reply

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("content-length", 0))) or b"{}")
        m = _PATH.search(h.path)
        model = m.group(1) if m else "?"
        req = Request(model, body, time.monotonic())
        with self.lock:
            self.requests.append(req)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            action = self._next_action(model)
            delay = action.get("sleep", self.latency_s)
            if delay:
                time.sleep(delay)
            prompt = "".join(p.get("text", "") for c in body.get("contents", []) for p in c.get("parts", []))
            status, reply = self._reply(action, prompt)
            data = json.dumps(reply).encode()
            req.status = status
            try:
                h.send_response(status)
                h.send_header("content-type", "application/json")
                h.send_header("content-length", str(len(data)))
                h.end_headers()
                h.wfile.write(data)
            except OSError:  # the client gave up (timeout)
                pass
        finally:
            with self.lock:
                self.in_flight -= 1
                req.end = time.monotonic()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=0.0, help="seconds before every answer")
    ap.add_argument("--score", type=float, default=0.3, help="the score answered by default")
    args = ap.parse_args()
    with JudgeServer(default_score=args.score, latency_s=args.latency) as server:
        print(server.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
