"""OpenRLHF's own command-line parser and validation, run without importing ray, vLLM or DeepSpeed.

The `if __name__ == "__main__":` block of the installed (patched) `openrlhf/cli/<entry>.py` is lifted out
with `ast`, stripped of its `train(args)` call and ModelScope import, and executed on a given argv.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import importlib.util
import io
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ENTRIES = {"ppo": "train_ppo_ray", "sft": "train_sft"}
# Environment variable naming a directory that holds `openrlhf/` (a patched copy); default: the installed one.
OPENRLHF_DIR_ENV = "RFT_OPENRLHF_DIR"


class FlagError(ValueError):
    """The command was rejected by OpenRLHF's parser or validation (message names the flag)."""


@dataclass
class ParseResult:
    """A parsed OpenRLHF namespace plus the warnings its validation printed."""

    args: argparse.Namespace
    warnings: list[str] = field(default_factory=list)


def installed_root() -> Path:
    """Directory that contains the installed `openrlhf/` package (located, not imported)."""
    spec = importlib.util.find_spec("openrlhf")  # locates the package without executing it
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"openrlhf is not installed for {sys.executable}")
    return Path(list(spec.submodule_search_locations)[0]).parent


def openrlhf_root(env: Mapping[str, str] | None = None) -> Path:
    """Directory that contains the `openrlhf/` package used for checks: $RFT_OPENRLHF_DIR in `env` (default: the
    process environment), else the installed one."""
    override = (os.environ if env is None else env).get(OPENRLHF_DIR_ENV)
    if not override:
        return installed_root()
    root = Path(override)
    if not (root / "openrlhf").is_dir():
        raise FileNotFoundError(f"{OPENRLHF_DIR_ENV}={override} has no openrlhf/ directory")
    return root


def cli_source(entry: str = "ppo", root: Path | None = None) -> Path:
    """Path of the CLI module for `entry` ('ppo' or 'sft') under `root` (default: `openrlhf_root()`)."""
    return (root or openrlhf_root()) / "openrlhf" / "cli" / f"{ENTRIES[entry]}.py"


def _is_train_call(stmt: ast.stmt) -> bool:
    call = getattr(stmt, "value", None)
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "train"
    )


def _stdlib_imports(tree: ast.Module) -> list[ast.stmt]:
    """Top-level imports of stdlib-only modules (argparse, datetime, math, os...)."""
    keep = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if all(n.split(".")[0] in sys.stdlib_module_names for n in names):
                keep.append(node)
    return keep


_CODE_CACHE: dict[tuple[str, float], object] = {}


def _compiled_main(path: Path):
    """Compile stdlib imports + top-level defs + the __main__ body (minus train/modelscope) of `path`."""
    key = (str(path), path.stat().st_mtime)
    if key in _CODE_CACHE:
        return _CODE_CACHE[key]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    mains = [n for n in tree.body if isinstance(n, ast.If) and "__name__" in ast.unparse(n.test)]
    if not mains:
        raise FlagError(f"{path}: no `if __name__ == '__main__':` block to take the parser from")
    body = [s for s in mains[0].body if not _is_train_call(s) and "modelscope" not in ast.unparse(s)]
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.Assign)]
    module = ast.Module(body=_stdlib_imports(tree) + defs + body, type_ignores=[])
    code = compile(module, str(path), "exec")
    _CODE_CACHE[key] = code
    return code


def parse_args(argv: list[str], entry: str = "ppo", root: Path | None = None) -> ParseResult:
    """Run the parser and validation of the OpenRLHF under `root` (default: `openrlhf_root()`) on `argv`; raise
    FlagError with its message on rejection."""
    path = cli_source(entry, root)
    code = _compiled_main(path)
    namespace: dict = {"__name__": "rft_flag_check", "argparse": argparse, "datetime": datetime.datetime}
    out, err = io.StringIO(), io.StringIO()
    old_argv = sys.argv
    sys.argv = [path.name, *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(code, namespace)  # noqa: S102 - OpenRLHF's own parser source, not model output
    except SystemExit as e:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        msg = lines[-1] if lines else f"argparse exited with status {e.code}"
        if e.code == 0:
            raise FlagError(f"OpenRLHF {path.name} exited early (--help?): {out.getvalue()[:200]}") from None
        raise FlagError(f"OpenRLHF {path.name} rejected the command: {msg}") from None
    except AssertionError as e:
        raise FlagError(f"OpenRLHF {path.name} validation failed: {e}") from None
    except Exception as e:  # validation code dereferencing a missing flag, e.g. reward_pretrain=None
        raise FlagError(f"OpenRLHF {path.name} validation crashed: {type(e).__name__}: {e}") from None
    finally:
        sys.argv = old_argv
    warnings = [ln.strip() for ln in out.getvalue().splitlines() if ln.strip()]
    return ParseResult(namespace["args"], warnings)


def _rft_actions(tree: ast.Module) -> list[argparse.Action]:
    """The actions `rft.plan.flags.add_flags` registers, when the CLI source imports them (the patched
    `train_ppo_ray`, through its hook module); none otherwise."""
    imports = any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("rft.")
                  and any(a.name == "flags" for a in n.names) for n in ast.walk(tree))
    if not imports:
        return []
    from rft.plan import flags

    parser = argparse.ArgumentParser(add_help=False)
    flags.add_flags(parser)
    return parser._actions


def known_flags(entry: str = "ppo", root: Path | None = None) -> set[str]:
    """Every option string the (patched) parser defines, e.g. {'--offload', '--pretrain', ...}."""
    tree = ast.parse(cli_source(entry, root).read_text(encoding="utf-8"))
    flags = {s for a in _rft_actions(tree) for s in a.option_strings}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags.update(
                a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")
            )
    return flags


def store_true_flags(entry: str = "ppo") -> set[str]:
    """The option strings the (patched) parser defines with `action="store_true"`, e.g. {'--offload', ...}."""
    tree = ast.parse(cli_source(entry).read_text(encoding="utf-8"))
    flags = {s for a in _rft_actions(tree) if isinstance(a, argparse._StoreTrueAction) for s in a.option_strings}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            action = next((k.value for k in node.keywords if k.arg == "action"), None)
            if isinstance(action, ast.Constant) and action.value == "store_true":
                flags.update(a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--"))
    return flags


NEGATION = "--no_"


def apply_negations(argv: list[str], entry: str = "ppo") -> list[str]:
    """Turn store_true flags off: `--no_<flag>` and `--<flag>` cancel out, the last one given wins.

    Both are removed; when `--<flag>` came last it stays, in the place of its first occurrence. A `--no_x`
    that OpenRLHF defines itself passes through; one whose `--x` is not a store_true flag is a FlagError.
    """
    known, switches = known_flags(entry), store_true_flags(entry)
    last: dict[str, bool | None] = {}
    for tok in argv:
        if tok.startswith(NEGATION) and tok not in known:
            flag = "--" + tok.removeprefix(NEGATION)
            if flag not in switches:
                raise FlagError(f"{tok}: {flag} is not a store_true flag of OpenRLHF {cli_source(entry).name}, "
                                "so there is nothing to turn off")
            last[flag] = False
        elif tok in switches:
            last[tok] = True
    out: list[str] = []
    for tok in argv:
        flag = "--" + tok.removeprefix(NEGATION) if tok.startswith(NEGATION) and tok not in known else tok
        if flag not in last:
            out.append(tok)
        elif last[flag] is True:
            out.append(flag)
            last[flag] = None  # placed: later occurrences go
    return out


def group_flags(argv: list[str]) -> list[list[str]]:
    """Split argv into [flag, values...] groups (a leading non-flag token forms its own group)."""
    groups: list[list[str]] = []
    for tok in argv:
        if tok.startswith("--") or not groups:
            groups.append([tok])
        else:
            groups[-1].append(tok)
    return groups


def _canonical(flag: str, flags: set[str]) -> str:
    """Full option name for `flag`, expanding a unique argparse-style abbreviation."""
    if flag in flags:
        return flag
    matches = [f for f in flags if f.startswith(flag)]
    return matches[0] if len(matches) == 1 else flag


def resolve_overrides(argv: list[str], entry: str = "ppo") -> list[str]:
    """Collapse repeated flags: the last occurrence wins and takes the place of the first.

    This is what argparse does with a repeated option, written out so the printed command shows only the
    values that take effect. `--flag=value` is split and abbreviations are expanded first.
    """
    flags = known_flags(entry)
    tokens: list[str] = []
    for tok in argv:
        if tok.startswith("--") and "=" in tok:
            tokens += tok.split("=", 1)
        else:
            tokens.append(tok)
    groups = [[_canonical(g[0], flags), *g[1:]] if g[0].startswith("--") else g for g in group_flags(tokens)]
    last = {g[0]: g for g in groups}
    out: list[str] = []
    seen: set[str] = set()
    for g in groups:
        if g[0] in seen:
            continue
        seen.add(g[0])
        out += last[g[0]]
    return out


def format_command(prefix: list[str], argv: list[str]) -> str:
    """Shell-quoted command, one flag (with its values) per line, joined by backslash continuations."""
    lines = [shlex.join(prefix)] + ["    " + shlex.join(g) for g in group_flags(argv)]
    return " \\\n".join(lines)
