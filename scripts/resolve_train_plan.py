"""Resolve the whole GPU `train` plan with pip, downloading metadata only: prints every package and version.

usage: python scripts/resolve_train_plan.py [--index https://pypi.org/simple] [--report FILE]

pip resolves from wheel metadata when the index advertises PEP 658 files (`<wheel>.metadata`); an index that
does not (this machine's proxy strips the field) makes pip download every wheel, several GB for this plan. This
script serves pip a local index that relays the real one and marks every wheel's metadata as available, so
`pip install --dry-run --ignore-installed --report` fetches only `.metadata` files (and flash-attn's source
archive, prepared without build isolation against the running interpreter's torch, as the real install does).
It needs network access to the index; it is a tool to run by hand, not a test.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import threading
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from rft.provision.train_env import STACK, TORCH_COMPANIONS  # noqa: E402

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


class RangeFile(io.RawIOBase):
    """A remote file read through HTTP range requests (for zipfile: the wheel's central directory and METADATA)."""

    def __init__(self, url: str):
        self.url, self.pos = url, 0
        head = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(head, timeout=120) as r:
            self.size = int(r.headers["Content-Length"])

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"})
        with urllib.request.urlopen(req, timeout=120) as r:
            data = r.read()
        self.pos += len(data)
        return data


def wheel_metadata(url: str) -> bytes:
    """A wheel's METADATA: its PEP 658 file when the index has one, else read from the wheel by range requests."""
    try:
        with urllib.request.urlopen(url + ".metadata", timeout=120) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
    with zipfile.ZipFile(RangeFile(url)) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        return z.read(name)


def relay(upstream: str) -> type[BaseHTTPRequestHandler]:
    """A handler answering /simple/<project>/ from `upstream` with core-metadata marked on every wheel, whose
    URLs point back here for the `.metadata` (GET /meta?url=...)."""

    class Handler(BaseHTTPRequestHandler):
        def reply(self, body: bytes, ctype: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            host = f"http://127.0.0.1:{self.server.server_address[1]}"
            try:
                if self.path.startswith("/meta/"):
                    url = urllib.parse.unquote(self.path.removeprefix("/meta/").removesuffix(".metadata"))
                    self.reply(wheel_metadata(url), "text/plain")
                    return
                req = urllib.request.Request(upstream.rstrip("/") + self.path.removeprefix("/simple"),
                                             headers={"Accept": JSON_TYPE})
                with urllib.request.urlopen(req, timeout=120) as r:
                    page = json.loads(r.read())
            except Exception as e:  # noqa: BLE001 - answered as a 404, pip names what it could not get
                self.send_error(404, str(e)[:200])
                return
            for f in page.get("files", []):
                if f["filename"].endswith(".whl"):
                    f["core-metadata"] = True
                    f["url"] = f"{host}/meta/{urllib.parse.quote(f['url'].split('#')[0], safe='')}"
            self.reply(json.dumps(page).encode(), JSON_TYPE)

        def log_message(self, *args) -> None:
            pass

    return Handler


def plan_requirements() -> list[str]:
    """Everything `make train` installs, as requirement strings: the torch step, flash-attn, rft[train] and rft."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [f"torch=={STACK['torch'][1]}", *TORCH_COMPANIONS, f"flash-attn=={STACK['flash_attn'][1]}",
            *project["dependencies"], *project["optional-dependencies"]["train"]]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--index", default="https://pypi.org/simple")
    p.add_argument("--report", type=Path, help="also write pip's JSON report here")
    ns = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), relay(ns.index))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    report = ns.report or Path("/tmp/rft-train-plan-report.json")
    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed",
           "--no-build-isolation", "--cert", "/etc/ssl/certs/ca-certificates.crt",
           "--index-url", f"http://127.0.0.1:{server.server_address[1]}/simple", "--report", str(report),
           *plan_requirements()]
    # flash-attn's setup.py: metadata only, no CUDA toolchain needed (the real install builds or fetches the wheel)
    env = {**os.environ, "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    server.shutdown()
    if res.returncode != 0:
        print(res.stdout[-3000:] + res.stderr[-3000:], file=sys.stderr)
        return 1
    installed = sorted((i["metadata"]["name"].lower(), i["metadata"]["version"])
                       for i in json.loads(report.read_text())["install"])
    for name, version in installed:
        print(f"{name}=={version}")
    torches = [v for n, v in installed if n == "torch"]
    pins = {d.lower(): v for d, v in STACK.values()}
    wrong = [f"{n} {v} (pinned {pins[n]})" for n, v in installed if n in pins and v.split("+")[0] != pins[n]]
    print(f"# {len(installed)} packages; torch: {', '.join(torches)}; "
          + ("every pin held" if not wrong and len(torches) == 1 else f"NOT held: {wrong}"), file=sys.stderr)
    return 0 if not wrong and len(torches) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
