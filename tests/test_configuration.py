"""docs/configuration.md lists every environment variable the tracked tree reads, and nothing that nothing reads.

The expectations come from the page (the first cell of each table row above its "Removed" section); the reads come
from scanning the tracked files: shell `${VAR:-...}` and unassigned `$VAR`, a shell helper that reads its first
argument indirectly (`${!1}`), Makefile `VAR ?=` and unassigned `$(VAR)`, and Python's `os.environ[...]`,
`.get(...)`, `os.getenv(...)`, `"VAR" in os.environ`, `helper(env, "VAR")`, and names in a module-level collection
the module loops over. Patches count by their added lines.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections import defaultdict
from pathlib import Path

from rft.plan.removed import PAGE as REMOVED_PAGE
from rft.plan.removed import REMOVED
from rft.provenance import REPO_ROOT as ROOT

PAGE = ROOT / "docs" / "configuration.md"
NAME = r"[A-Z][A-Z0-9_]*"
ENVIRON = {"os.environ", "environ", "env", "environment"}  # expressions that name the environment (or a copy)
BASH_OWN = {"BASH_SOURCE", "BASH_REMATCH", "BASH_VERSION", "BASHPID", "EUID", "FUNCNAME", "HOSTNAME", "IFS",
            "LINENO", "OPTARG", "OPTIND", "PIPESTATUS", "PPID", "RANDOM", "REPLY", "SECONDS", "SHLVL", "UID"}
MAKE_OWN = {"CURDIR", "MAKE", "MAKEFLAGS", "MAKECMDGOALS", "SHELL"}

Reads = dict[str, list[str]]  # variable -> ["file:line", ...]


def tracked() -> list[str]:
    """The tracked files (what a fresh clone holds)."""
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if (ROOT / f).is_file()]


def code_lines(text: str, comment: str = "#") -> list[tuple[int, str]]:
    """(line number, line) of the lines that are not whole-line comments."""
    return [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if not ln.lstrip().startswith(comment)]


SH_DEFAULTED = re.compile(r"\$\{(" + NAME + r")(?::?[-=?+])")
SH_READ = re.compile(r"\$\{?(" + NAME + r")\b(?!\[)")
SH_ASSIGN = re.compile(r"(?:^|[\s;(&|])(?:export\s+|local\s+|readonly\s+|declare\s+(?:-\w+\s+)*)?(" + NAME
                       + r")(?:\+?=|\[[^]]*\]=)|\bfor\s+(" + NAME + r")\s+in\b|\bread\s+(?:-\w+\s+)*(" + NAME + r")")
SH_INDIRECT_FN = re.compile(r"^(\w+)\s*\(\)\s*\{(?:(?!^\}).)*\$\{!1", re.M | re.S)


def shell_assigned(text: str) -> set[str]:
    """Names a shell file assigns (so a plain `$NAME` there reads its own variable, not the environment's)."""
    names = set()
    for _, ln in code_lines(text):
        for m in SH_ASSIGN.finditer(ln):
            names.add(next(g for g in m.groups() if g))
    return names


def shell_reads(path: str, text: str, assigned: set[str], indirect: set[str]) -> Reads:
    """Environment reads of one shell file: defaulted expansions, expansions of names it never assigns, and the
    first argument of a helper that expands it indirectly."""
    reads: Reads = defaultdict(list)
    for i, ln in code_lines(text):
        names = {m.group(1) for m in SH_DEFAULTED.finditer(ln)}
        names |= {m.group(1) for m in SH_READ.finditer(ln)} - assigned - BASH_OWN
        for fn in indirect:
            names |= set(re.findall(r"(?:^|[\s;])" + fn + r"\s+(" + NAME + r")\b", ln))
        for name in names:
            reads[name].append(f"{path}:{i}")
    return reads


def make_reads(path: str, text: str) -> Reads:
    """`VAR ?= default` (the environment wins) and `$(VAR)` of a variable the Makefile never sets."""
    lines = code_lines(text)
    assigned = {m.group(1) for _, ln in lines if (m := re.match(r"(?:export\s+)?(" + NAME + r")\s*[:+]?=", ln))}
    reads: Reads = defaultdict(list)
    for i, ln in lines:
        if m := re.match(r"(" + NAME + r")\s*\?=", ln):
            reads[m.group(1)].append(f"{path}:{i}")
        for name in set(re.findall(r"\$\((" + NAME + r")\)", ln)) - assigned - MAKE_OWN:
            reads[name].append(f"{path}:{i}")
        for name in set(re.findall(r"\$\$\{?(" + NAME + r")", ln)) - BASH_OWN:
            reads[name].append(f"{path}:{i}")
    return reads


def _text(node: ast.AST) -> str:
    """The expression's source; `(os.environ if env is None else env)` reads as the environment it picks."""
    if isinstance(node, ast.IfExp) and {_text(node.body), _text(node.orelse)} & ENVIRON:
        return "os.environ"
    return ast.unparse(node)


def python_reads(path: str, text: str) -> Reads:
    """Environment reads of one Python file (see the module docstring for the forms)."""
    tree = ast.parse(text, filename=path)
    consts: dict[str, str] = {}
    collections: dict[str, list[tuple[str, int]]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                consts[target] = value.value
            items = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", None)
            if isinstance(value, (ast.Dict, ast.Tuple, ast.List, ast.Set)) and items:
                collections[target] = [(k.value, k.lineno) for k in items
                                       if isinstance(k, ast.Constant) and isinstance(k.value, str)]

    def name_of(node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return consts.get(node.id)
        return None

    reads: Reads = defaultdict(list)

    def add(node: ast.AST | None, lineno: int) -> None:
        name = name_of(node)
        if name and re.fullmatch(NAME, name):
            reads[name].append(f"{path}:{lineno}")

    looped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _text(node.value) in ENVIRON:
            add(node.slice, node.lineno)
        elif isinstance(node, ast.Call):
            func = _text(node.func)
            if func == "os.getenv" or (isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                                        and _text(node.func.value) in ENVIRON):
                add(node.args[0] if node.args else None, node.lineno)
            elif len(node.args) >= 2 and _text(node.args[0]) in ENVIRON:
                add(node.args[1], node.lineno)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            if any(_text(c) in ENVIRON for c in node.comparators):
                add(node.left, node.lineno)
        elif isinstance(node, (ast.For, ast.comprehension)):
            it = node.iter
            base = it.func.value if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) else it
            if isinstance(base, ast.Name) and base.id in collections:
                looped.add(base.id)
    for coll in looped:
        for name, lineno in collections[coll]:
            if re.fullmatch(NAME, name):
                reads[name].append(f"{path}:{lineno}")
    return reads


def patch_reads(path: str, text: str) -> Reads:
    """Environment reads on the added lines of a patch (`os.environ[...]`, `.get(...)`, `os.getenv(...)`)."""
    pattern = re.compile(r"(?:environ(?:\.get)?\(|environ\[|getenv\(|env\.get\()\s*[\"'](" + NAME + r")[\"']")
    reads: Reads = defaultdict(list)
    for i, ln in enumerate(text.splitlines(), 1):
        if ln.startswith("+") and not ln.startswith("+++"):
            for name in pattern.findall(ln):
                reads[name].append(f"{path}:{i}")
    return reads


def scan() -> Reads:
    """Every environment variable the tracked tree reads, with where."""
    files = tracked()
    shells = {f: (ROOT / f).read_text(errors="replace") for f in files if f.endswith(".sh") or f == ".ci/run"}
    indirect = {m.group(1) for text in shells.values() for m in SH_INDIRECT_FN.finditer(text)}
    own = {f: shell_assigned(text) for f, text in shells.items()}
    reads: Reads = defaultdict(list)

    def merge(found: Reads) -> None:
        for name, where in found.items():
            reads[name] += where

    for f, text in shells.items():
        # a sourced library sees what its sourcing scripts assign, and a script what the libraries it sources do
        sourcing = (own[g] for g, t in shells.items() if Path(f).name in t and g != f)
        sourced = (own[g] for g in shells if g != f and f"/{g}" in text and "source" in text)
        assigned = own[f].union(*sourcing, *sourced)
        merge(shell_reads(f, text, assigned, indirect))
    for f in files:
        if f.endswith(".py"):
            merge(python_reads(f, (ROOT / f).read_text()))
        elif f.endswith(".patch"):
            merge(patch_reads(f, (ROOT / f).read_text()))
        elif f == "Makefile":
            merge(make_reads(f, (ROOT / f).read_text()))
    return dict(reads)


def page_variables(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """(listed, removed): the names in the first cell of each table row, above and below "## Removed", with lines."""
    listed: dict[str, int] = {}
    removed: dict[str, int] = {}
    target = listed
    for i, ln in enumerate(text.splitlines(), 1):
        if ln.startswith("## "):
            target = removed if ln.lower().startswith("## removed") else listed
        elif ln.startswith("|") and not re.match(r"\|\s*-", ln):
            first = ln.split("|")[1]
            for name in re.findall(r"`(" + NAME + r")(?:=[^`]*)?`", first):
                target.setdefault(name, i)
    return listed, removed


def test_the_scan_finds_each_form_of_read(tmp_path):
    """The forms the page relies on are recognised (so an empty scan cannot pass for an agreeing one)."""
    sh = 'X=${MODEL:-m}\necho "$OUT_ROOT $X ${ARGS[@]}"\nARGS=(a)\nsw() { local v="${!1:-$2}"; }\nsw SMOKE 0\n'
    py = 'import os\nK = "B_VAR"\ndef f(env=None):\n    return (os.environ if env is None else env).get(K)\n'
    assert python_reads("b.py", py) == {"B_VAR": ["b.py:4"]}
    got = shell_reads("a.sh", sh, shell_assigned(sh), {"sw"})
    assert sorted(got) == ["MODEL", "OUT_ROOT", "SMOKE"] and got["SMOKE"] == ["a.sh:5"]
    py = ('import os\nK = "RFT_K"\nT = {"NS": "--n"}\nos.environ["A"]; os.environ.get(K); os.getenv("B")\n'
          '"C" in os.environ\nnum(env, "D", 1)\nfor v in T: env.get(v)\nos.environ["E"] = "1"\n')
    got = python_reads("a.py", py)
    assert sorted(got) == ["A", "B", "C", "D", "NS", "RFT_K"]  # E is written, not read
    mk = "PY ?= python3\nB := x\nt:\n\t$(PY) $(B) $(MODULES) $${HOME}\n"
    assert sorted(make_reads("Makefile", mk)) == ["HOME", "MODULES", "PY"]


def test_every_variable_read_is_on_the_page_and_every_listed_one_is_read():
    listed, removed = page_variables(PAGE.read_text())
    reads = scan()
    unlisted = [f"{name} (read at {', '.join(where[:3])})" for name, where in sorted(reads.items())
                if name not in listed and name not in removed]
    unread = [f"{name} (docs/configuration.md:{line})" for name, line in sorted(listed.items()) if name not in reads]
    still = [f"{name} (read at {', '.join(reads[name][:3])})" for name in sorted(removed) if name in reads]
    assert not unlisted, "read but not on docs/configuration.md: " + "; ".join(unlisted)
    assert not unread, "on docs/configuration.md but read nowhere: " + "; ".join(unread)
    assert not still, "in the page's Removed table but still read: " + "; ".join(still)


def test_the_removed_table_is_the_launchers():
    """The page's Removed rows that name a variable are, in order, the ones the launcher refuses while set
    (rft/plan/removed.py), with the same new way; and the launcher's pointer is that section's anchor."""
    text = PAGE.read_text()
    heading = next(ln for ln in text.splitlines() if ln.lower().startswith("## removed"))
    rows = []
    for ln in text[text.index(heading):].splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("|") and re.fullmatch(r"`" + NAME + r"(=[^`]*)?`", cells[0]):
            rows.append((cells[0].strip("`"), cells[1].replace("`", "")))
    assert rows == list(REMOVED)
    anchor = re.sub(r"[^\w\- ]", "", heading[3:].lower()).replace(" ", "-")
    assert REMOVED_PAGE == f"docs/configuration.md#{anchor}"


def user_variables(text: str) -> list[str]:
    """The names of the page's rows of kind **user** (the settings a user changes), above its Removed section."""
    names: list[str] = []
    for ln in text[:text.lower().index("\n## removed")].splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("|") and len(cells) == 5 and cells[3] == "user":
            names += re.findall(r"`(" + NAME + r")`", cells[0])
    return names


def test_at_most_sixty_user_settings():
    """One dialect: a setting one flag can say is that flag, so the variables a user sets stay few."""
    names = user_variables(PAGE.read_text())
    assert "MODEL" in names and "PROMPT_HISTORY" not in names
    assert len(names) <= 60, f"{len(names)} user variables on docs/configuration.md"
