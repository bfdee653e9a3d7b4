#!/usr/bin/env python3
"""The wheels `make gpu-check` needs on a bare one-GPU machine (Python 3.12, torch, no network): fetch, list, install.

python benchmarks/gpu_check_wheels.py download DIR        # here, with network: the wheels below, sizes, total
python benchmarks/gpu_check_wheels.py install DIR SITE    # there: pip install --no-index --no-deps --target SITE
Then PYTHONPATH=SITE:. python benchmarks/gpu_check.py --out OUT (SITE first: transformers 4.57.6 over the 5.x there).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

MIB = 1024**2
CARRY_LIMIT_MIB = 64  # what one call to a bare machine carries
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
)


def download_command(dest: Path, python: str = sys.executable) -> list[str]:
    """`pip download` of exactly WHEELS for CPython 3.12 on manylinux x86_64, binary only, no dependencies."""
    cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(dest),
           "--python-version", PYTHON_VERSION, "--implementation", "cp", "--abi", ABI, "--abi", "abi3", "--abi", "none"]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    return cmd + list(WHEELS)


def _dist_name(spec: str) -> str:
    return spec.split("==")[0].lower().replace("-", "_")


def listing(dest: Path) -> tuple[list[tuple[str, int]], int]:
    """(wheel file, bytes) for each of WHEELS found in `dest`, and the total; ValueError naming any missing."""
    files = sorted(dest.glob("*.whl"))
    found, missing = [], []
    for spec in WHEELS:
        name, version = _dist_name(spec), spec.split("==")[1]
        hit = [f for f in files if f.name.lower().startswith(f"{name}-{version}-")]
        if hit:
            found.append((hit[0].name, hit[0].stat().st_size))
        else:
            missing.append(spec)
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
            *(str(dest / name) for name, _ in found)]


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
        found, total = listing(args.dir)
        print(render(found, total))
        if total > CARRY_LIMIT_MIB * MIB:
            print(f"gpu-check-wheels: {total / MIB:.1f} MiB exceeds the {CARRY_LIMIT_MIB} MiB carry limit",
                  file=sys.stderr)
            return 1
        return 0
    subprocess.run(install_command(args.dir, args.site), check=True)
    print(f"installed into {args.site}: run with PYTHONPATH={args.site}:$PWD")
    return 0


if __name__ == "__main__":
    sys.exit(main())
