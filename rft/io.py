"""Small helpers shared by every tool: atomic writes, JSONL reading, hashing, argv flags, live processes."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` via a temp file in the same directory and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 `text` to `path` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: object) -> None:
    """Write `obj` as indented JSON to `path` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Write `rows` as JSONL to `path` atomically; returns the number of rows."""
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def iter_jsonl_lines(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line; a bad line raises ValueError naming file:line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Yield the objects of a JSONL file (see iter_jsonl_lines)."""
    for _, obj in iter_jsonl_lines(path):
        yield obj


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a whole JSONL file (see iter_jsonl)."""
    return list(iter_jsonl(path))


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def flag_value(argv: list[str], flag: str) -> str | None:
    """The token after the last `flag` in `argv` (argparse's rule: a later flag wins, so "$@" overrides the
    recipe), None when the flag is absent or last."""
    for i in range(len(argv) - 2, -1, -1):
        if argv[i] == flag:
            return argv[i + 1]
    return None


def add_env_flag(parser: argparse.ArgumentParser, name: str, env: str, help_: str, *, otherwise: str = "",
                 **kwargs: object) -> None:
    """Add argument `name` whose default is environment variable `env`, named in its help after `help_`."""
    parser.add_argument(name, default=os.environ.get(env), help=f"{help_} (default: ${env}{otherwise})", **kwargs)


def pid_alive(pid: int) -> bool:
    """True while process `pid` exists on this host (also when it belongs to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
