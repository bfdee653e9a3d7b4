"""The GPU training environment: find one that holds the pinned stack, else build `.venv-train` by a fixed recipe.

`python3 -m rft.provision.train_env plan` prints the node's prerequisites (rft/provision/prereqs.py), the environment
found and the install order, and runs nothing but read-only probes; `ensure` stops on a missing prerequisite
before any download, then uses the environment found or builds one beside the target (`.venv-train.building`),
verifies it, renames it into place only then, so a half-built environment never shadows a working one, and
builds DeepSpeed's FusedAdam at that final path with the launch's TORCH_EXTENSIONS_DIR (renaming back if that
fails). stdout carries only the interpreter; every child's output goes to stderr. flash-attn is not built (an
hour of nvcc): the recipes use eager attention and OpenRLHF only imports it, so an import-only stand-in wheel
satisfies OpenRLHF's pin.
Stdlib only: it runs before any environment exists.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from rft.provenance import REPO_ROOT as REPO
from rft.provision.caches import cache_env
from rft.provision.prereqs import problems, read_host

# The pinned stack: import name -> (distribution, version). torch is vLLM 0.15.1's own pin (torch==2.9.1,
# torchvision==0.24.1, torchaudio==2.9.1 in its metadata); OpenRLHF 0.9.3 pins flash-attn==2.8.3.
STACK = {
    "torch": ("torch", "2.9.1"),
    "vllm": ("vllm", "0.15.1"),
    "openrlhf": ("openrlhf", "0.9.3"),
    "deepspeed": ("deepspeed", "0.18.5"),
    "flash_attn": ("flash-attn", "2.8.3"),
    "ray": ("ray", "2.48.0"),
    "transformers": ("transformers", "4.57.6"),
    "peft": ("peft", "0.17.1"),
}
TORCH_COMPANIONS = ("torchvision==0.24.1", "torchaudio==2.9.1")
# The import-only flash_attn (raising when called) under a local version that satisfies OpenRLHF's ==2.8.3 pin.
STANDIN_SOURCE = REPO / "rft" / "cpu" / "site" / "flash_attn"
STANDIN_VERSION = f"{STACK['flash_attn'][1]}+rft.standin"

# Runs inside a candidate interpreter: {import name: [distribution version or None, importable]}.
PROBE = """
import importlib.metadata as md, importlib.util as iu, json, sys
stack = json.loads(sys.argv[1])
out = {}
for mod, (dist, _) in stack.items():
    try:
        version = md.version(dist)
    except md.PackageNotFoundError:
        version = None
    out[mod] = [version, iu.find_spec(mod) is not None]
print(json.dumps({"python": sys.executable, "prefix": sys.prefix, "stack": out}))
"""

VERIFY_MARK = "RFT_VERIFY "
"""Starts the one line of VERIFY's and FUSED_ADAM's stdout that holds their result: DeepSpeed logs to stdout too."""

# Runs inside the built environment: real imports, CUDA, and the versions again.
VERIFY = """
import importlib, importlib.metadata as md, json, sys
stack = json.loads(sys.argv[1])
bad = []
for mod, (dist, want) in stack.items():
    try:
        importlib.import_module(mod)
    except Exception as e:
        bad.append(f"import {mod}: {type(e).__name__}: {e}")
        continue
    have = md.version(dist).split("+")[0]
    if have != want:
        bad.append(f"{dist} {have}, pinned {want}")
try:
    import torch
    if not torch.cuda.is_available():
        bad.append("torch.cuda.is_available() is False")
except Exception as e:
    bad.append(f"torch.cuda: {type(e).__name__}: {e}")
print("\\n" + sys.argv[2] + json.dumps(bad), flush=True)
"""

# Runs in the environment at its final path: DeepSpeed's JIT build of FusedAdam into TORCH_EXTENSIONS_DIR.
FUSED_ADAM = """
import json, sys
try:
    from deepspeed.ops.op_builder import FusedAdamBuilder
    FusedAdamBuilder().load()
    bad = []
except Exception as e:
    bad = [f"DeepSpeed FusedAdam build: {type(e).__name__}: {e}"]
print("\\n" + sys.argv[1] + json.dumps(bad), flush=True)
"""

INSTALLED_MARK = "rft-installed"
"""Written into `.building` once every install step passed: a later `ensure` verifies it again, downloading nothing."""


@dataclass
class EnvReport:
    """What one candidate interpreter holds of the stack."""

    python: str
    found: dict[str, str | None] = field(default_factory=dict)  # import name -> version (None: absent)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def judge(python: str, probe: dict) -> EnvReport:
    """Compare a probe's result with STACK: every module importable at its pinned version (local tags ignored)."""
    rep = EnvReport(python)
    for mod, (dist, want) in STACK.items():
        version, importable = probe.get(mod, [None, False])
        rep.found[mod] = version
        if version is None or not importable:
            rep.problems.append(f"{dist} missing")
        elif version.split("+")[0] != want:
            rep.problems.append(f"{dist} {version}, pinned {want}")
    return rep


def probe_env(python: str) -> EnvReport:
    """Run PROBE in `python` (nothing is imported there but the stdlib)."""
    try:
        res = subprocess.run([python, "-c", PROBE, json.dumps(STACK)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return EnvReport(python, problems=[f"cannot run: {e}"])
    if res.returncode != 0:
        return EnvReport(python, problems=[f"probe failed: {res.stderr.strip()[-300:]}"])
    last = (res.stdout.strip().splitlines() or [""])[-1]  # a startup hook may print before the result
    try:
        return judge(python, json.loads(last)["stack"])
    except (json.JSONDecodeError, KeyError, TypeError):
        return EnvReport(python, problems=[f"probe printed no result line: {last[-200:]!r}"])


def candidates(env: dict[str, str], venv: Path) -> list[str]:
    """Interpreters to consider, in order: $PYTHON, the built venv, the active conda env / virtualenv, python3."""
    out = []
    if env.get("PYTHON"):
        out.append(env["PYTHON"])
    out.append(str(venv / "bin" / "python"))
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if env.get(var):
            out.append(str(Path(env[var]) / "bin" / "python"))
    found = shutil.which("python3", path=env.get("PATH"))
    if found:
        out.append(found)
    seen, unique = set(), []
    for c in out:
        if c not in seen and Path(c).exists():
            seen.add(c)
            unique.append(c)
    return unique


def find_env(env: dict[str, str], venv: Path) -> tuple[EnvReport | None, list[EnvReport]]:
    """(the first candidate holding the whole pinned stack or None, every candidate's report)."""
    reports = [probe_env(c) for c in candidates(env, venv)]
    return next((r for r in reports if r.ok), None), reports


def standin_wheel_name() -> str:
    return f"flash_attn-{STANDIN_VERSION}-py3-none-any.whl"


def build_standin_wheel(dest: Path, source: Path = STANDIN_SOURCE) -> Path:
    """Write the flash_attn stand-in as a wheel in `dest` (a zip with its dist-info, no build tool); returns it."""
    dist = f"flash_attn-{STANDIN_VERSION}.dist-info"
    files = {f"flash_attn/{p.relative_to(source).as_posix()}": p.read_bytes()
             for p in sorted(source.rglob("*.py"))}
    files[f"{dist}/METADATA"] = (f"Metadata-Version: 2.1\nName: flash-attn\nVersion: {STANDIN_VERSION}\n"
                                 "Summary: rft's import-only flash_attn stand-in (no kernels)\n"
                                 "Requires-Dist: einops\n").encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: rft\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{dist}/RECORD"]).encode()
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / standin_wheel_name()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel


def install_steps(base_python: str, building: Path, repo: Path = REPO) -> list[tuple[str, list[str]]]:
    """The recipe, in order: (what, argv). torch first at vLLM's pin, the flash_attn stand-in (nothing built),
    then the rest under a constraint that keeps that torch and the stand-in."""
    pip = [str(building / "bin" / "python"), "-m", "pip"]
    torch_pin = f"torch=={STACK['torch'][1]}"
    constraints = building / "constraints-train.txt"
    return [
        ("venv", [base_python, "-m", "venv", str(building)]),
        ("pip, setuptools, wheel", [*pip, "install", "-U", "pip", "setuptools", "wheel"]),
        (f"{torch_pin} (vLLM 0.15.1's pin) first", [*pip, "install", torch_pin, *TORCH_COMPANIONS]),
        (f"flash-attn {STANDIN_VERSION}: the import-only stand-in, nothing built",
         [*pip, "install", "--no-deps", str(building / standin_wheel_name())]),
        ("the rest: rft[train] with torch and flash-attn held",
         [*pip, "install", "-c", str(constraints), "-e", f"{repo}[train]"]),
        ("pip check", [*pip, "check"]),
    ]


def constraints_text() -> str:
    """Pins the later steps must not move."""
    return f"torch=={STACK['torch'][1]}\nflash-attn=={STANDIN_VERSION}\n" + "\n".join(TORCH_COMPANIONS) + "\n"


def describe(found: EnvReport | None, reports: list[EnvReport], venv: Path, base_python: str) -> str:
    """The plan, as `plan` prints it."""
    lines = ["# candidate environments (pinned: " + ", ".join(f"{d}=={v}" for d, v in STACK.values()) + ")"]
    for r in reports:
        state = "OK, holds the pinned stack" if r.ok else "; ".join(r.problems)
        lines.append(f"  {r.python}: {state}")
    if found is not None:
        lines.append(f"environment found: {found.python} (nothing to install)")
        return "\n".join(lines)
    building = venv.with_name(venv.name + ".building")
    lines.append(f"no environment holds the pinned stack: would build {building}, verify it, rename it to {venv}")
    for i, (what, argv) in enumerate(install_steps(base_python, building), start=1):
        lines.append(f"  {i}. {what}: {' '.join(argv)}")
    n = len(install_steps(base_python, building))
    lines.append(f"  {n + 1}. verify: the pinned versions, real imports, torch.cuda.is_available()")
    lines.append(f"  {n + 2}. rename {building.name} -> {venv.name}, then DeepSpeed's FusedAdam built there into "
                 "TORCH_EXTENSIONS_DIR (renamed back if it fails)")
    return "\n".join(lines)


def relocate(src: Path, dst: Path) -> None:
    """Rename a venv from `src` to `dst` (absent) and point its scripts (shebangs, activate) at the new path."""
    src.rename(dst)
    old, new = str(src), str(dst)
    for f in (dst / "bin").iterdir():
        if f.is_file() and not f.is_symlink():
            try:
                text = f.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            if old in text:
                f.write_text(text.replace(old, new))


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the launch's cache variables (rft/provision/caches.py): FusedAdam lands where the actors look."""
    return {**env, **cache_env(env)}


def run_check(python: Path, script: str, args: list[str], env: Mapping[str, str], what: str) -> None:
    """Run `script` in `python`; its result is the last VERIFY_MARK line of stdout (a JSON list of problems).
    Raises RuntimeError `verify failed: ...` naming what failed: the exit status, a missing line, bad JSON, a problem."""
    try:
        res = subprocess.run([str(python), "-c", script, *args, VERIFY_MARK], capture_output=True, text=True,
                             env=dict(env), timeout=3600)
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"verify failed: {what}: {python} did not run: {e}") from None
    tail = (res.stderr.strip().splitlines() or ["(no stderr)"])[-1][-300:]
    if res.returncode != 0:
        raise RuntimeError(f"verify failed: {what}: {python} exited {res.returncode}: {tail}")
    marked = [ln[len(VERIFY_MARK):] for ln in res.stdout.splitlines() if ln.startswith(VERIFY_MARK)]
    if not marked:
        raise RuntimeError(f"verify failed: {what}: no {VERIFY_MARK.strip()} line in {python}'s output ({tail})")
    try:
        bad = json.loads(marked[-1])
    except json.JSONDecodeError as e:
        raise RuntimeError(f"verify failed: {what}: its {VERIFY_MARK.strip()} line is not JSON ({e}): "
                           f"{marked[-1][:200]}") from None
    if not isinstance(bad, list):
        raise RuntimeError(f"verify failed: {what}: its {VERIFY_MARK.strip()} line is not a list: {marked[-1][:200]}")
    if bad:
        raise RuntimeError(f"verify failed: {what}: {'; '.join(map(str, bad))}")


def install_all(base_python: str, building: Path, venv: Path, log: Callable[[str], None], out: TextIO) -> None:
    """The install steps into a fresh `building`, every child's output to `out`; marks it INSTALLED_MARK."""
    if building.exists():
        shutil.rmtree(building)  # a build that did not finish its install steps
    for i, (what, argv) in enumerate(install_steps(base_python, building), start=1):
        log(f"[{i}] {what}")
        if subprocess.run(argv, stdout=out, stderr=out).returncode != 0:
            raise RuntimeError(f"step {i} ({what}) failed: {' '.join(argv)}; {venv} left as it was")
        if i == 1:  # the venv exists now: the pins the later steps are held to, and the stand-in wheel
            (building / "constraints-train.txt").write_text(constraints_text())
            build_standin_wheel(building)
    (building / INSTALLED_MARK).write_text("every install step passed; verify next\n")


def swap_in(building: Path, venv: Path, env: Mapping[str, str]) -> None:
    """Rename `building` to `venv` (the old one aside), build FusedAdam there; on failure put both back."""
    old = venv.with_name(venv.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if venv.exists():
        venv.rename(old)
    relocate(building, venv)
    try:
        run_check(venv / "bin" / "python", FUSED_ADAM, [], env, "FusedAdam at its final path")
    except RuntimeError:
        relocate(venv, building)
        if old.exists():
            old.rename(venv)
        raise
    if old.exists():
        shutil.rmtree(old)


def build(base_python: str, venv: Path, log: Callable[[str], None] = print, out: TextIO | None = None,
          env: Mapping[str, str] | None = None) -> str:
    """Build beside `venv`, verify, rename into place, build FusedAdam there; returns the new interpreter.
    Every child writes to `out` (default stderr), never to stdout. Raises RuntimeError."""
    out = sys.stderr if out is None else out
    env = child_env(os.environ if env is None else env)
    building = venv.with_name(venv.name + ".building")
    if (building / INSTALLED_MARK).exists():
        log(f"{building} holds a finished install: verifying it again, nothing downloaded "
            f"(rm -rf {building} to start over)")
    else:
        install_all(base_python, building, venv, log, out)
    kept = (f"{venv} left as it was; {building} kept: the next `make train-env` verifies it again without "
            f"downloading (rm -rf {building} to start over)")
    log(f"[verify] the pinned versions, real imports, torch.cuda.is_available() in {building}")
    try:
        run_check(building / "bin" / "python", VERIFY, [json.dumps(STACK)], env, "imports and versions")
        log(f"[install] rename to {venv}, then DeepSpeed's FusedAdam into {env['TORCH_EXTENSIONS_DIR']}")
        swap_in(building, venv, env)
    except RuntimeError as e:
        raise RuntimeError(f"{e}; {kept}") from None
    (venv / INSTALLED_MARK).unlink(missing_ok=True)
    return str(venv / "bin" / "python")


def prerequisite_lines(bad: list[str], warn: list[str]) -> str:
    """The prerequisites block `plan` and `ensure` print first."""
    lines = ["# prerequisites (rft/provision/prereqs.py)"]
    lines += [f"  ERROR {b}" for b in bad] + [f"  WARN {w}" for w in warn]
    if not bad and not warn:
        lines.append("  all met")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m rft.provision.train_env", description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("plan", "ensure"), help="plan: print, run nothing; ensure: find or build")
    p.add_argument("--venv", default=str(REPO / ".venv-train"), help="the environment to build (default .venv-train)")
    p.add_argument("--base-python", default=sys.executable, help="interpreter the venv is built from")
    p.add_argument("--profile", choices=("20b", "120b"), default="20b",
                   help="the recipe whose host RAM and model cache the checks size (default 20b)")
    ns = p.parse_args(argv)
    venv = Path(ns.venv).absolute()
    env = dict(os.environ)
    found, reports = find_env(env, venv)
    bad, warn = problems(read_host(env, ns.base_python, venv), ns.profile, building=found is None)
    text = prerequisite_lines(bad, warn) + "\n" + describe(found, reports, venv, ns.base_python)
    if ns.action == "plan":
        print(text)
        return 1 if bad else 0
    print(text, file=sys.stderr)
    if bad:
        print(f"train env: {len(bad)} prerequisite(s) missing (ERROR lines above); nothing was downloaded",
              file=sys.stderr)
        return 1
    if found is not None:
        print(found.python)
        return 0
    try:
        python = build(ns.base_python, venv, log=lambda m: print(m, file=sys.stderr, flush=True))
    except RuntimeError as e:
        print(f"train env: {e}", file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
