"""apply_patches.sh and patches/series against the real, pristine OpenRLHF 0.9.3 wheel."""

from __future__ import annotations

import ast
import filecmp
import importlib
import re
import subprocess
import sys
from pathlib import Path

from rft.fixtures.patched_openrlhf import ROOT, run_apply, stub_env

PATCHES = ROOT / "patches"
MAIL_HEADER = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
# patches still importing rft.train modules other than the hooks (the thin-hook rewrite of these files is pending)
PATCHED_MODULES = [
    "openrlhf.models.loss",
    "openrlhf.models.actor",
    "openrlhf.trainer.ppo_utils.experience_maker",
    "openrlhf.trainer.ray.ppo_actor",
    "openrlhf.trainer.ray.vllm_engine",
    "openrlhf.trainer.ray.vllm_worker_wrap",
    "openrlhf.trainer.ppo_trainer",
    "openrlhf.trainer.ppo_trainer_async",
    "openrlhf.utils.deepspeed.deepspeed",
    "openrlhf.cli.train_ppo_ray",
    "openrlhf.utils.agent",
    "openrlhf.trainer.ppo_utils.replay_buffer",
]


def series() -> list[str]:
    return [ln.strip() for ln in (PATCHES / "series").read_text().splitlines() if ln.strip() and ln[0] != "#"]


def rft_imports(patch: str) -> list[tuple[str, str]]:
    """(module, name) of every `from rft... import ...` a patch adds, parenthesised continuations included."""
    added = [ln[1:] for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(added):
        stmt = added[i].strip()
        if stmt.startswith("from rft"):
            while stmt.count("(") > stmt.count(")"):
                i += 1
                stmt += "\n" + added[i].strip()  # a comment may end a line
            node = ast.parse(stmt).body[0]
            assert isinstance(node, ast.ImportFrom)
            out += [(node.module or "", alias.name) for alias in node.names]
        i += 1
    return out


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def litter(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.suffix in (".rej", ".orig") or p.name.endswith("~")]


def test_series_names_every_patch_once():
    names = series()
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(p.name for p in PATCHES.glob("*.patch"))
    for name in names:
        text = (PATCHES / name).read_text()
        assert text.startswith(MAIL_HEADER), name  # `git format-patch` form (scripts/patch_branch.py export)
        assert f"Subject: {name.removesuffix('.patch')}: " in text, name


def test_one_patch_per_upstream_file():
    """Each OpenRLHF file is changed by exactly one patch (deepspeed.patch: the two files of its package)."""
    owners: dict[str, list[str]] = {}
    for name in series():
        for path in re.findall(r"^\+\+\+ b/(\S+)", (PATCHES / name).read_text(), re.M):
            owners.setdefault(path, []).append(name)
    assert owners and all(len(names) == 1 for names in owners.values()), owners
    for path, (name,) in owners.items():
        assert name == ("deepspeed.patch" if "/utils/deepspeed/" in path else f"{Path(path).stem}.patch"), path


def exists_here(mod: str, name: str) -> bool:
    """`from mod import name` resolves in this tree (not another checkout's): a module's name, or a submodule."""
    path = ROOT / mod.replace(".", "/")
    if (path / f"{name}.py").is_file():
        return True
    return Path(f"{path}.py").is_file() and hasattr(importlib.import_module(mod), name)


def test_every_rft_name_a_patch_imports_exists():
    found = {name: rft_imports((PATCHES / name).read_text()) for name in series()}
    assert ("rft.train.hooks", "ppo_actor") in found["ppo_actor.patch"]  # the reader's own check
    missing = [f"{patch}: from {mod} import {name}" for patch, names in found.items() for mod, name in names
               if not exists_here(mod, name)]
    assert not missing, missing


def test_patches_import_only_the_hooks():
    """A patch imports from rft.train.hooks.* only, so moving an rft module touches a hook module, never a patch."""
    outside = [f"{patch}: from {mod} import {name}" for patch in series()
               for mod, name in rft_imports((PATCHES / patch).read_text())
               if not (mod.startswith("rft.train.hooks.") or mod == "rft.train.hooks")]
    plain = [f"{patch}: {ln}" for patch in series() for ln in (PATCHES / patch).read_text().splitlines()
             if re.match(r"\+\s*import rft\b", ln)]
    assert not outside and not plain, outside + plain


def test_apply_reapply_check_reverse(openrlhf_copy, pristine_openrlhf_root):
    before = tree(openrlhf_copy)
    first = run_apply(target=openrlhf_copy)
    assert first.returncode == 0, first.stderr
    assert f"applied {len(series())} patches" in first.stdout
    after = tree(openrlhf_copy)
    changed = {k for k in after if after[k] != before.get(k)}
    assert "openrlhf/models/loss.py" in changed and "openrlhf/trainer/ray/ppo_actor.py" in changed

    again = run_apply(target=openrlhf_copy)
    assert again.returncode == 0, again.stderr
    assert "already applied" in again.stdout
    assert tree(openrlhf_copy) == after

    check = run_apply("--check", target=openrlhf_copy)
    assert check.returncode == 0, check.stdout
    for name in series():
        assert f"{name}" in check.stdout
    assert sum(ln.split()[-1] == "applied" and ".patch" in ln for ln in check.stdout.splitlines()) == len(series())

    rev = run_apply("--reverse", target=openrlhf_copy)
    assert rev.returncode == 0, rev.stderr
    assert tree(openrlhf_copy) == before
    cmp = filecmp.dircmp(openrlhf_copy / "openrlhf", pristine_openrlhf_root / "openrlhf", ignore=["__pycache__"])
    assert not cmp.diff_files and not cmp.left_only and not cmp.right_only

    unapplied = run_apply("--check", target=openrlhf_copy)
    assert unapplied.returncode == 1
    assert sum(ln.endswith(".patch") is False and ln.rstrip().endswith("not applied") and ".patch" in ln
               for ln in unapplied.stdout.splitlines()) == len(series())
    assert not litter(openrlhf_copy)


def test_conflict_changes_nothing_and_names_patch_and_hunk(openrlhf_copy):
    trainer = openrlhf_copy / "openrlhf/trainer/ppo_trainer.py"
    text = trainer.read_text()
    assert "        # Log to wandb/tensorboard\n" in text
    trainer.write_text(text.replace("        # Log to wandb/tensorboard\n", "        # log (locally edited)\n"))
    before = tree(openrlhf_copy)

    res = run_apply(target=openrlhf_copy)
    assert res.returncode == 1
    assert "ppo_trainer.patch" in res.stderr
    assert "Hunk #" in res.stderr and "FAILED" in res.stderr
    assert "nothing was changed" in res.stderr
    assert tree(openrlhf_copy) == before
    assert not litter(openrlhf_copy)

    check = run_apply("--check", target=openrlhf_copy)
    assert check.returncode == 2
    assert "ppo_trainer.patch" in check.stdout and "conflicts" in check.stdout
    assert f"  {'loss.patch':<28} not applied" in check.stdout


def test_refuses_any_other_version(openrlhf_copy):
    meta = openrlhf_copy / "openrlhf-0.9.4.dist-info" / "METADATA"
    meta.parent.mkdir()
    meta.write_text("Metadata-Version: 2.1\nName: openrlhf\nVersion: 0.9.4\n")
    before = tree(openrlhf_copy)
    res = run_apply(target=openrlhf_copy)
    assert res.returncode == 1
    assert "0.9.4" in res.stderr and "0.9.3 only" in res.stderr
    assert tree(openrlhf_copy) == before


def test_finds_the_installed_openrlhf_through_python(openrlhf_copy):
    meta = openrlhf_copy / "openrlhf-0.9.3.dist-info" / "METADATA"
    meta.parent.mkdir()
    meta.write_text("Metadata-Version: 2.1\nName: openrlhf\nVersion: 0.9.3\n")
    env = {"PYTHONPATH": str(openrlhf_copy), "PYTHON": sys.executable}
    res = run_apply(env=env)
    assert res.returncode == 0, res.stderr
    assert str(openrlhf_copy) in res.stdout
    check = run_apply("--check", env=env)
    assert check.returncode == 0 and f"at {openrlhf_copy}/openrlhf" in check.stdout
    bad = run_apply("--bogus")
    assert bad.returncode == 2 and "--bogus" in bad.stderr


def test_every_patched_module_compiles_and_imports(openrlhf_copy):
    assert run_apply(target=openrlhf_copy).returncode == 0
    code = (
        "import importlib, sys\n"
        f"mods = {PATCHED_MODULES!r}\n"
        "for m in mods:\n"
        "    mod = importlib.import_module(m)\n"
        f"    assert mod.__file__.startswith({str(openrlhf_copy)!r}), mod.__file__\n"
        "print('imported', len(mods))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=stub_env(openrlhf_copy), timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"imported {len(PATCHED_MODULES)}" in res.stdout
    comp = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(openrlhf_copy / "openrlhf")], capture_output=True, text=True
    )
    assert comp.returncode == 0, comp.stdout + comp.stderr
