"""A local HTTP server on 127.0.0.1 speaking the part of the Hugging Face Hub API that model_info and
snapshot_download use (point huggingface_hub at it with HF_ENDPOINT), for tests/provision/test_download.py.

One model repo at one commit: `GET /api/models/<repo>[/revision/<rev>]` lists its files (with sizes only when
asked with `blobs=true`, as the Hub does), `HEAD`/`GET /<repo>/resolve/<rev>/<path>` serve a file with the headers
hf_hub_download reads. `claimed` overrides the size the listing reports for a file. Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class HubRepo:
    repo: str
    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    claimed: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)


class HubServer:
    """Serve `repo` until `close()`; `url` is the HF_ENDPOINT to use."""

    def __init__(self, repo: HubRepo) -> None:
        self.repo = repo
        handler = type("Handler", (_Handler,), {"hub": repo})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    hub: HubRepo

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes, headers: dict[str, str], head: bool = False) -> None:
        self.send_response(code)
        for k, v in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _route(self, head: bool) -> None:
        url = urlparse(self.path)
        path = unquote(url.path)
        self.hub.requests.append((self.command, self.path))
        api = f"/api/models/{self.hub.repo}"
        if path in (api, f"{api}/revision/main", f"{api}/revision/{self.hub.sha}"):
            blobs = parse_qs(url.query).get("blobs", [""])[0].lower() == "true"
            siblings = [{"rfilename": name, **({"size": self.hub.claimed.get(name, len(data))} if blobs else {})}
                        for name, data in self.hub.files.items()]
            body = json.dumps({"id": self.hub.repo, "modelId": self.hub.repo, "sha": self.hub.sha,
                               "siblings": siblings, "private": False}).encode()
            return self._send(200, body, {"Content-Type": "application/json"}, head)
        for rev in ("main", self.hub.sha):
            prefix = f"/{self.hub.repo}/resolve/{rev}/"
            if path.startswith(prefix) and path[len(prefix):] in self.hub.files:
                data = self.hub.files[path[len(prefix):]]
                return self._send(200, data, {"X-Repo-Commit": self.hub.sha,
                                              "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}, head)
        return self._send(404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}, head)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)
