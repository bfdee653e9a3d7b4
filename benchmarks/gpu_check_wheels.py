#!/usr/bin/env python3
"""The wheels `make gpu-check` needs on a bare one-GPU machine (Python 3.12, torch, no network): fetch, list, install.

python benchmarks/gpu_check_wheels.py download DIR        # here, with network: the wheels below, DeepSpeed built
                                                          # without ops, OpenRLHF 0.9.3 with the series applied
python benchmarks/gpu_check_wheels.py install DIR SITE    # there: pip install --no-index --no-deps --target SITE
Then PYTHONPATH=SITE:. python benchmarks/gpu_check.py --out OUT (SITE first: transformers 4.57.6 over the 5.x there).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MIB = 1024**2
CARRY_LIMIT_MIB = 40  # what the check may take of the 64 MiB one call to a bare machine carries
PYTHON_VERSION, ABI = "3.12", "cp312"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")

# The check's import path beyond what the bare machine has (torch, numpy, pyyaml, regex, tqdm and the like): the project's pins (pyproject.toml [dev]), and the requests stack huggingface_hub < 1.0 imports at start.
WHEELS = (
    "transformers==4.57.6",
    "huggingface_hub==0.36.2",  # transformers 4.57 refuses hub >= 1.0
    "tokenizers==0.22.2",  # transformers 4.57.6: >=0.22.0,<=0.23.0
    "peft==0.17.1",
    "safetensors==0.8.0",
    "accelerate==1.15.0",  # the version peft 0.17.1 was tested with here (the machine's own may be newer)
    "requests==2.34.2",
    "urllib3==2.8.0",
    "idna==3.20",
    "charset_normalizer==3.5.3",
    "certifi==2026.10.19.post1",
    # the trainer phase: DeepSpeed's imports beyond the machine's (msgpack, einops, ninja, py-cpuinfo, psutil,
    # nvidia-ml-py are there) and OpenRLHF's (torchdata's StatefulDataLoader, pylatexenc in its math utils)
    "hjson==3.1.0",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "annotated_types==0.8.0",
    "typing_inspection==0.4.5",
    "torchdata==0.11.0",
    "pylatexenc==2.11",
)
# PyPI has DeepSpeed as a source archive only: built here with no ops into a pure wheel (FusedAdam is JIT-built
# there, as at a launch)
DEEPSPEED = "deepspeed==0.18.5"
OPENRLHF = "openrlhf==0.9.3"
PATCHED_DIR = "openrlhf-0.9.3-patched"  # the series applied here: the bare machine may have no `patch`
STAMP = "series.sha256"


def download_command(dest: Path, python: str = sys.executable) -> list[str]:
    """`pip download` of exactly WHEELS for CPython 3.12 on manylinux x86_64, binary only, no dependencies."""
    cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(dest),
           "--python-version", PYTHON_VERSION, "--implementation", "cp", "--abi", ABI, "--abi", "abi3", "--abi", "none"]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    return cmd + list(WHEELS)


def _dist_name(spec: str) -> str:
    return spec.split("==")[0].lower().replace("-", "_")


def series_digest() -> str:
    """SHA-256 over patches/series and every patch it names, in order: what the carried OpenRLHF was patched with."""
    h = hashlib.sha256()
    series = ROOT / "patches" / "series"
    h.update(series.read_bytes())
    for line in series.read_text().splitlines():
        name = line.split("#")[0].strip()
        if name:
            h.update((ROOT / "patches" / name).read_bytes())
    return h.hexdigest()


def build_deepspeed(dest: Path, python: str = sys.executable) -> None:
    """DeepSpeed's pure wheel (DS_BUILD_OPS=0: no op compiled) built with this interpreter's torch."""
    subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dest),
                    DEEPSPEED], check=True, env={**os.environ, "DS_BUILD_OPS": "0"})


def patched_openrlhf(dest: Path, python: str = sys.executable) -> None:
    """OpenRLHF 0.9.3's wheel unpacked (its package and dist-info) and the series applied, into dest/PATCHED_DIR."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--dest", tmp, OPENRLHF], check=True)
        wheel = next(Path(tmp).glob("openrlhf-0.9.3-*.whl"))
        stage = Path(tmp) / "site"
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                rel = name.split("/purelib/", 1)[1] if "/purelib/" in name else name
                if rel.startswith(("openrlhf/", "openrlhf-0.9.3.dist-info/")):
                    (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                    (stage / rel).write_bytes(zf.read(name))
        subprocess.run(["bash", str(ROOT / "apply_patches.sh"), "--target", str(stage)], check=True,
                       stdout=subprocess.DEVNULL)
        (stage / STAMP).write_text(series_digest() + "\n")
        target = dest / PATCHED_DIR
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(stage, target)


def listing(dest: Path) -> tuple[list[tuple[str, int]], int]:
    """(wheel file, bytes) for each of WHEELS, DeepSpeed and the patched OpenRLHF found in `dest`, and the total;
    ValueError naming any missing."""
    files = sorted(dest.glob("*.whl"))
    found, missing = [], []
    for spec in (*WHEELS, DEEPSPEED):
        name, version = _dist_name(spec), spec.split("==")[1]
        hit = [f for f in files if f.name.lower().startswith(f"{name}-{version}-")]
        if hit:
            found.append((hit[0].name, hit[0].stat().st_size))
        else:
            missing.append(spec)
    patched = dest / PATCHED_DIR
    if patched.is_dir():
        found.append((PATCHED_DIR + "/", sum(f.stat().st_size for f in patched.rglob("*") if f.is_file())))
    else:
        missing.append(f"{OPENRLHF} with the series ({PATCHED_DIR}/)")
    if missing:
        raise ValueError(f"{dest}: no wheel for {', '.join(missing)}")
    return found, sum(size for _, size in found)


def render(found: list[tuple[str, int]], total: int) -> str:
    width = max(len(n) for n, _ in found)
    lines = [f"{name:<{width}}  {size / MIB:7.2f} MiB" for name, size in found]
    lines.append(f"{'total (' + str(len(found)) + ' wheels)':<{width}}  {total / MIB:7.2f} MiB "
                 f"(a call carries at most {CARRY_LIMIT_MIB} MiB)")
    return "\n".join(lines)


def install_command(dest: Path, site: Path, python: str = sys.executable) -> list[str]:
    """Offline install of the listed wheels into `site` (nothing of the machine's own environment changes)."""
    found, _ = listing(dest)
    return [python, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(site),
            *(str(dest / name) for name, _ in found if name.endswith(".whl"))]


def install_patched(dest: Path, site: Path) -> None:
    """The carried patched OpenRLHF into `site`; refused when it was patched with another series than this tree's."""
    src = dest / PATCHED_DIR
    got = (src / STAMP).read_text().strip() if (src / STAMP).exists() else "none"
    if got != series_digest():
        raise SystemExit(f"{src}: patched with another series (sha256 {got[:12]}, this tree {series_digest()[:12]}): "
                         "run make gpu-check-wheels again")
    for item in src.iterdir():
        if item.name != STAMP:
            shutil.rmtree(site / item.name, ignore_errors=True)
            shutil.copytree(item, site / item.name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("download", help="pip download the wheels into DIR and list them with their sizes")
    d.add_argument("dir", type=Path, help="folder for the wheels (created if missing)")
    d.add_argument("--list-only", action="store_true", help="list DIR's wheels without downloading")
    i = sub.add_parser("install", help="install DIR's wheels into SITE, offline")
    i.add_argument("dir", type=Path, help="folder holding the downloaded wheels")
    i.add_argument("site", type=Path, help="target folder to put first on PYTHONPATH")
    args = p.parse_args(argv)
    if args.cmd == "download":
        if not args.list_only:
            args.dir.mkdir(parents=True, exist_ok=True)
            subprocess.run(download_command(args.dir), check=True)
            build_deepspeed(args.dir)
            patched_openrlhf(args.dir)
        found, total = listing(args.dir)
        print(render(found, total))
        if total > CARRY_LIMIT_MIB * MIB:
            print(f"gpu-check-wheels: {total / MIB:.1f} MiB exceeds the {CARRY_LIMIT_MIB} MiB carry limit",
                  file=sys.stderr)
            return 1
        return 0
    subprocess.run(install_command(args.dir, args.site), check=True)
    install_patched(args.dir, args.site)
    print(f"installed into {args.site}: run with PYTHONPATH={args.site}:$PWD")
    return 0


if __name__ == "__main__":
    sys.exit(main())
