#!/usr/bin/env python3
"""The first hour rehearsed on a machine with network and no GPU: a fresh clone, the real pinned environment built as
`make train-env` builds it, the patches, every module the run loads imported, both recipes' dry runs; one table.

usage: python3 scripts/rehearse.py [--scratch DIR] [--keep]      (make rehearse)
Downloads ~5.5 GB into an ~11 GB environment under DIR (default a temporary folder, removed at the end unless --keep).
CUDA-only steps (the driver, torch.cuda, FusedAdam's JIT build) are listed as skipped. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# What a run imports beyond the stack itself: vLLM's gpt-oss model and MXFP4 path, OpenRLHF's trainer and engine.
MODULES = ("vllm.model_executor.models.gpt_oss", "vllm.model_executor.layers.quantization.mxfp4",
           "openrlhf.cli.train_ppo_ray", "openrlhf.trainer.ppo_trainer", "openrlhf.trainer.ray.vllm_engine",
           "openrlhf.trainer.ray.ppo_actor", "rft.train.lora_merge", "rft.gptoss.attention")
CUDA_ONLY = ("torch.cuda.is_available() is False",)
RECIPES = ("train_grpo_20b_a28a.sh", "train_grpo_120b.sh")


class Table:
    """The rehearsal's rows: step, seconds, size, result."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, str, str]] = []

    def add(self, step: str, seconds: float, size: str, result: str) -> None:
        self.rows.append((step, seconds, size, result))
        print(f"rehearse: {step}: {result} ({seconds:.1f} s{', ' + size if size else ''})", file=sys.stderr,
              flush=True)

    def markdown(self) -> str:
        lines = ["| step | time | size | result |", "|---|---:|---:|---|"]
        lines += [f"| {s} | {t:.1f} s | {z} | {r} |" for s, t, z, r in self.rows]
        return "\n".join(lines) + "\n"

    def ok(self) -> bool:
        return all(not r.startswith("FAIL") for *_, r in self.rows)


def du(path: Path) -> str:
    """The folder's size on disk (du -sh)."""
    res = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True)
    return res.stdout.split()[0] if res.returncode == 0 and res.stdout else "?"


def run(argv: list[str], cwd: Path, env: dict | None = None, log: Path | None = None) -> tuple[int, str, float]:
    """(exit status, output tail, seconds) of one command, its whole output appended to `log`."""
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if log is not None:
        with log.open("a", encoding="utf-8") as fh:
            fh.write(f"$ {' '.join(argv)}\n{res.stdout}{res.stderr}\n")
    return res.returncode, (res.stdout + res.stderr).strip()[-400:], time.monotonic() - t0


def rehearse(repo: Path, scratch: Path, table: Table) -> None:
    """Every step in order; a failed step ends the rehearsal (the rest would not mean anything)."""
    clone, log = scratch / "rft", scratch / "rehearse.log"
    rc, tail, s = run(["git", "clone", "-q", str(repo), str(clone)], scratch, log=log)
    table.add("fresh clone", s, du(clone), "ok" if rc == 0 else f"FAIL: {tail}")
    if rc:
        return
    sys.path.insert(0, str(clone))
    from rft.provision import train_env as te
    from rft.provision.prereqs import problems, read_host

    bad, warn = problems(read_host(dict(os.environ), sys.executable, clone / ".venv-train"))
    table.add("prerequisites (make train-env's first lines)", 0.0, "",
              "listed: " + "; ".join(bad + warn)[:300] if bad or warn else "ok")
    venv = clone / ".venv-train"
    building = venv.with_name(venv.name + ".building")
    marks: list[tuple[str, float]] = []
    with log.open("a", encoding="utf-8") as out:
        try:
            te.install_all(sys.executable, building, venv, lambda m: marks.append((m, time.monotonic())), out)
            failed = None
        except RuntimeError as e:
            failed = str(e)
    marks.append(("end", time.monotonic()))
    for (what, t0), (_, t1) in zip(marks, marks[1:], strict=False):
        table.add(f"install {what}", t1 - t0, "", "ok")
    if failed:
        table.rows[-1] = (*table.rows[-1][:3], f"FAIL: {failed}")
        return
    table.add("environment built", 0.0, du(building), "ok")
    env = te.child_env(dict(os.environ))
    t0 = time.monotonic()
    res = subprocess.run([str(building / "bin" / "python"), "-c", te.VERIFY, json.dumps(te.STACK), te.VERIFY_MARK],
                         capture_output=True, text=True, env=env)
    marked = [ln[len(te.VERIFY_MARK):] for ln in res.stdout.splitlines() if ln.startswith(te.VERIFY_MARK)]
    problems_found = json.loads(marked[-1]) if marked else [f"no result line (exit {res.returncode})"]
    rest = [p for p in problems_found if p not in CUDA_ONLY]
    table.add("verify: pinned versions, real imports", time.monotonic() - t0, "",
              f"FAIL: {'; '.join(rest)}" if rest else "ok")
    table.add("verify: torch.cuda.is_available()", 0.0, "", "skipped: CUDA only (no GPU here)")
    t0 = time.monotonic()
    te.relocate(building, venv)
    table.add(f"rename to {venv.name}", time.monotonic() - t0, du(venv), "ok")
    table.add("FusedAdam JIT build into TORCH_EXTENSIONS_DIR", 0.0, "", "skipped: CUDA only (needs a GPU's torch)")
    py = str(venv / "bin" / "python")
    rc, tail, s = run(["bash", "apply_patches.sh"], clone, env={**os.environ, "PYTHON": py}, log=log)
    table.add("apply_patches.sh", s, "", "ok" if rc == 0 else f"FAIL: {tail}")
    for mod in MODULES:
        rc, tail, s = run([py, "-c", f"import {mod}"], clone, env={**env, "CUDA_VISIBLE_DEVICES": ""}, log=log)
        table.add(f"import {mod}", s, "", "ok" if rc == 0 else f"FAIL: {tail.splitlines()[-1] if tail else rc}")
    for script in RECIPES:
        rc, tail, s = run(["bash", script, "--dry-run", "--pool", "400"], clone, env={**env, "PYTHON": py}, log=log)
        text = (scratch / "rehearse.log").read_text(errors="replace").rsplit(f"$ bash {script}", 1)[-1]
        accepted = "flags: accepted by OpenRLHF's own parser" in text
        errors = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("ERROR")]
        result = ("ok: flags accepted by OpenRLHF's parser" if accepted else "FAIL: flags not accepted")
        if errors:
            result += f"; {len(errors)} ERROR line(s): {'; '.join(e[6:90] for e in errors[:2])}"
        table.add(f"bash {script} --dry-run", s, "", result)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scratch", type=Path, help="folder for the clone and its environment (default: a temporary one)")
    p.add_argument("--repo", type=Path, default=REPO, help="the repository to clone (default: this one)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (default: removed at the end)")
    args = p.parse_args(argv)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="rft-rehearse-"))
    scratch.mkdir(parents=True, exist_ok=True)
    table = Table()
    try:
        rehearse(args.repo, scratch, table)
    finally:
        text = table.markdown()
        print(text)
        (scratch.parent / f"{scratch.name}.md").write_text(text, encoding="utf-8")
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0 if table.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
