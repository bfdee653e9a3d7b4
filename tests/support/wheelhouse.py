"""A local wheelhouse for `make train-env` in seconds: a tiny stand-in wheel for every distribution the recipe
installs, under the pinned name and version, and the real setuptools, wheel and packaging zipped back from this
interpreter.

Names come from the recipe (rft/provision/train_env.py: STACK, TORCH_COMPANIONS) and pyproject (rft's dependencies,
the `train` extra); a version the recipe does not pin comes from docs/train-plan.txt. The stand-ins carry no
dependencies but openrlhf's einops (the flash_attn stand-in's one), so `pip check` holds.
`torch.cuda.is_available()` answers $RFT_STANDIN_CUDA == "1"; `deepspeed` prints to stdout on import as the real
one does without CUDA, and its FusedAdamBuilder().load() writes a build.ninja naming sys.prefix under
$TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions), rebuilding (one line in builds.log) whenever that text
changes, as ninja does when the venv moves.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
import zipfile
from pathlib import Path

from rft.provenance import REPO_ROOT as ROOT
from rft.provision.train_env import STACK, TORCH_COMPANIONS

TORCH = """import os


class cuda:
    @staticmethod
    def is_available() -> bool:
        return os.environ.get("RFT_STANDIN_CUDA") == "1"
"""

DEEPSPEED = """print("[WARNING] [real_accelerator.py:260:get_accelerator] Setting accelerator to CPU. If you have GPU or "
      "other accelerator, we were unable to detect it.")
"""

OP_BUILDER = """import os
import sys
from pathlib import Path


class FusedAdamBuilder:
    def load(self):
        root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")
        build = root / "py311_cu128" / "fused_adam"
        build.mkdir(parents=True, exist_ok=True)
        ninja = f"include {sys.prefix}/include\\nbuild fused_adam.o: {sys.prefix}/lib/deepspeed/adam.cu\\n"
        if not (build / "build.ninja").exists() or (build / "build.ninja").read_text() != ninja:
            (build / "build.ninja").write_text(ninja)
            with open(build / "builds.log", "a") as log:
                log.write(sys.prefix + "\\n")
        print("Loading extension module fused_adam...")
        return object()
"""


def write_wheel(dest: Path, dist: str, version: str, files: dict[str, bytes], extras: tuple[str, ...] = (),
                requires: tuple[str, ...] = ()) -> Path:
    """A py3-none-any wheel of `files` (archive path -> bytes) with its dist-info; returns its path."""
    stem = f"{re.sub(r'[-.]+', '_', dist)}-{version}"
    info = f"{stem}.dist-info"
    meta = (f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n" + "".join(f"Provides-Extra: {e}\n" for e in extras)
            + "".join(f"Requires-Dist: {r}\n" for r in requires))
    files = {**files, f"{info}/METADATA": meta.encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: rft-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]).encode()
    wheel = dest / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel


def wheel_from_installed(dest: Path, dist: str) -> Path:
    """This interpreter's installed `dist` (pure Python) zipped back into a wheel, its own RECORD kept."""
    d = md.distribution(dist)
    name, version = d.metadata["Name"], d.version
    stem = f"{re.sub(r'[-.]+', '_', name)}-{version}"
    wheel = dest / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for f in d.files or []:
            path = Path(d.locate_file(f))
            if not str(f).startswith("..") and path.is_file() and "__pycache__" not in f.parts:
                z.write(path, str(f))
    return wheel


def recipe_pins() -> dict[str, str]:
    """Every distribution the recipe installs -> its version: STACK and the torch companions as pinned, rft's
    dependencies and `train` extra at their pin or docs/train-plan.txt's version, einops (the stand-in's one)."""
    plan = dict(line.split("==") for line in (ROOT / "docs" / "train-plan.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for req in [*project["dependencies"], *project["optional-dependencies"]["train"], "einops"]:
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*(==\s*([^\s;,#]+))?", req)
        name = m.group(1)
        pins[name] = m.group(4) or plan[name]
    pins.update({dist: version for dist, version in STACK.values()})
    pins.update(dict(c.split("==") for c in TORCH_COMPANIONS))
    del pins["flash-attn"]  # train_env writes its own stand-in wheel
    return pins


SITE_PTH = "rft_tests_real_site.pth"
"""A linked wheelhouse's torch stand-in carries it: a .pth importing REAL_SITE's module."""
REAL_SITE = """import os
import sys
from importlib.machinery import PathFinder
from importlib.metadata import DistributionFinder, MetadataPathFinder


class CudaAsTold:
    \"\"\"The real torch's loader; torch.cuda.is_available() then answers $RFT_STANDIN_CUDA == "1".\"\"\"

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        module.cuda.is_available = lambda: os.environ.get("RFT_STANDIN_CUDA") == "1"


class RealSite:
    \"\"\"Last on sys.meta_path: a top-level module nothing else found is looked up in {site}.\"\"\"

    @staticmethod
    def find_spec(name, path=None, target=None):
        spec = None if "." in name else PathFinder.find_spec(name, [{site!r}])
        if spec is not None and name == "torch":
            spec.loader = CudaAsTold(spec.loader)
        return spec

    @staticmethod
    def find_distributions(context=DistributionFinder.Context()):
        \"\"\"A distribution asked by name (a real package's own version checks), after the venv's; never in a
        listing of all, so pip sees the venv alone.\"\"\"
        if context.name is None:
            return iter(())
        return MetadataPathFinder.find_distributions(DistributionFinder.Context(name=context.name, path=[{site!r}]))


sys.meta_path.append(RealSite)
"""
FAKED = ("deepspeed", "vllm", "openrlhf")
"""What a linked wheelhouse still fakes: DeepSpeed's CUDA build, vLLM (no CPU build in the real site) and openrlhf
(the pristine files, patched in the venv); the real torch's CUDA answers as the stand-in's (REAL_SITE)."""


def build_wheelhouse(dest: Path, openrlhf_source: Path, real_site: Path | None = None) -> Path:
    """The wheelhouse: a stand-in per recipe_pins() entry (openrlhf carrying `openrlhf_source`'s pristine package,
    so apply_patches.sh patches real files), setuptools, wheel and packaging from this interpreter.
    With `real_site` (linked): only FAKED carry modules; every other stand-in is its name, version and metadata,
    and the torch stand-in's SITE_PTH adds a finder of last resort for top-level modules in `real_site`, so their
    imports find the real CPU packages there while pip, `pip check` and the version checks see only the pins (a
    finder has no distributions: `real_site` is not on sys.path)."""
    dest.mkdir(parents=True, exist_ok=True)
    special = {
        "torch": ({SITE_PTH: b"import rft_tests_real_site\n",
                   "rft_tests_real_site.py": REAL_SITE.format(site=str(real_site)).encode()}
                  if real_site else {"torch/__init__.py": TORCH.encode()}),
        "deepspeed": {"deepspeed/__init__.py": DEEPSPEED.encode(), "deepspeed/ops/__init__.py": b"",
                      "deepspeed/ops/op_builder/__init__.py": OP_BUILDER.encode()},
        "openrlhf": {f"openrlhf/{p.relative_to(openrlhf_source).as_posix()}": p.read_bytes()
                     for p in sorted(openrlhf_source.rglob("*")) if p.is_file()},
    }
    for dist, version in recipe_pins().items():
        module = re.sub(r"[-.]+", "_", dist).lower()
        own = {} if real_site and dist not in FAKED else {f"{module}/__init__.py": f"__version__ = {version!r}\n".encode()}
        files = special.get(dist, own)
        write_wheel(dest, dist, version, files, extras=("default",) if dist == "ray" else (),
                    requires=("einops",) if dist == "openrlhf" else ())  # as the real one: the flash_attn stand-in's
    for dist in ("setuptools", "wheel", "packaging"):  # the real build tools and what wheel requires
        wheel_from_installed(dest, dist)
    return dest
