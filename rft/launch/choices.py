"""rft's own launch choices, one environment variable each, turned into the OpenRLHF flags they stand for.

REWARD (em | judge | a reward file), LORA_SYNC (merge | native), DYNAMIC_FILTER and SMOKE: each sets several flags
at once. Everything one OpenRLHF flag can say is said with the flag itself (`--no_<flag>` turns a store_true off):
`--prompt_history`, `--full_determinism` (which also turns on vLLM's batch-invariant kernels here),
`--no_load_checkpoint` (start fresh).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rft.io import flag_value
from rft.provenance import REPO_ROOT
from rft.reward.settings import load_settings

REWARD_FILES = {"em": "reward_func_em.py", "judge": "reward_func_judge.py"}
SYNC_FLAGS = {
    # merge: W0 + s·B@A written into the engines' weights; native: the engines serve the adapter (enable_lora).
    # Both send only the adapter through the Ray object store (docs/lora-sync.md).
    "merge": ["--vllm_sync_lora_via_object_store"],
    "native": ["--vllm_sync_lora_via_object_store", "--vllm_sync_lora_native"],
}
SMOKE_SUFFIX = "-smoke"
SMOKE_PATH_ENV = ("METRICS_LOG_DIR", "SAMPLES_LOG_DIR", "SPIKE_LOG_PATH")


class ChoiceError(ValueError):
    """A choice variable holds a value it cannot take (the message names the variable)."""


@dataclass
class Decisions:
    """The flags rft's choices add (in front of the script's, `tail` after them), the environment they set, and
    one line each for --dry-run."""

    flags: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def switch(env: dict[str, str], name: str, default: str = "0") -> bool:
    """A 0/1 variable; ChoiceError names it when it holds anything else."""
    value = env.get(name) or default
    if value not in ("0", "1"):
        raise ChoiceError(f"{name}={value}: expected 0 or 1")
    return value == "1"


def reward_scheme(env: dict[str, str]) -> str:
    """The exact-match reward's scheme, `binary` or `signed`: reward.toml's `[reward] scheme`, as the reward files
    read it (the one place the launcher looks it up)."""
    return load_settings(env=env).scheme


def reward_file(env: dict[str, str]) -> tuple[str, Path]:
    """REWARD as (kind, file): `em` / `judge` name rft's reward files, anything else must be an existing file."""
    value = env.get("REWARD") or "em"
    if value in REWARD_FILES:
        return value, REPO_ROOT / REWARD_FILES[value]
    path = Path(value)
    if not path.is_file():
        raise ChoiceError(f"REWARD={value}: expected em, judge or the path of a reward file (no such file)")
    for kind, name in REWARD_FILES.items():
        if path.resolve() == (REPO_ROOT / name).resolve():
            return kind, path
    return "file", path


def filter_flags(env: dict[str, str], kind: str, scheme: str) -> list[str]:
    """DYNAMIC_FILTER=1 (docs/launching.md#prompts-that-teach-nothing) for the reward in use.

    A binary exact match and a reward file of the user's own filter on the score mean, range (0, 1); the judge
    (a right answer pays 0.8-1.0) and the signed scheme (a wrong one pays -1 or -0.5) on the mean of the
    `correctness` log (--dynamic_filtering_key, rft.plan.flags).
    """
    flags = []
    if switch(env, "DYNAMIC_FILTER"):
        by_score = kind == "file" or (kind == "em" and scheme == "binary")
        key = [] if by_score else ["--dynamic_filtering_key", "correctness"]
        flags += ["--dynamic_filtering", *key, "--dynamic_filtering_reward_range", "0", "1"]
    return flags


def determinism(argv: list[str]) -> tuple[dict[str, str], str]:
    """--full_determinism (docs/reproducibility.md): OpenRLHF's deterministic torch algorithms, deterministic
    flash-attention backward and in-process vLLM engine core, plus vLLM's batch-invariant kernels
    (VLLM_BATCH_INVARIANT=1); (environment, the --dry-run line)."""
    if "--full_determinism" not in argv:
        return {}, "determinism: seeded only (--full_determinism: + VLLM_BATCH_INVARIANT=1)"
    return {"VLLM_BATCH_INVARIANT": "1"}, "determinism: --full_determinism, VLLM_BATCH_INVARIANT=1"


def lora_sync_flags(env: dict[str, str], argv: list[str]) -> list[str]:
    """LORA_SYNC=merge (default) | native for a LoRA command (--lora_rank > 0); a full-parameter one takes none."""
    value = env.get("LORA_SYNC")
    rank = flag_value(argv, "--lora_rank") or "0"
    if not rank.lstrip("-").isdigit():
        return []  # OpenRLHF's own parser names the bad value in the checks
    if int(rank) <= 0:
        if value:
            raise ChoiceError(f"LORA_SYNC={value} applies to LoRA runs (--lora_rank > 0); this command trains "
                              "every parameter")
        return []
    if (value or "merge") not in SYNC_FLAGS:
        raise ChoiceError(f"LORA_SYNC={value}: expected merge or native")
    return SYNC_FLAGS[value or "merge"]


def resume_flags(argv: list[str], smoke: bool, fresh: bool = False) -> tuple[list[str], str]:
    """--load_checkpoint when --ckpt_path holds a complete DeepSpeed save (`_actor/latest`), with its line.

    OpenRLHF 0.9.3 then restores the weights, optimizer, scheduler, global step and data position; it loads
    whenever `_actor` exists and raises without `latest` (a run killed in its first save), hence the test.
    `fresh` (--no_load_checkpoint on the command line) starts fresh; a smoke run always does.
    """
    ckpt = flag_value(argv, "--ckpt_path")
    latest = Path(ckpt) / "_actor" / "latest" if ckpt else None
    if smoke:
        return [], "resume: no (a smoke run starts fresh; it saves at SMOKE_RESUME_STEP and relaunches once to resume)"
    if fresh:
        return [], "resume: no (--no_load_checkpoint)"
    if latest is None or not latest.is_file():
        return [], f"resume: no (no complete checkpoint in {latest.parent if latest else 'no --ckpt_path'})"
    return ["--load_checkpoint"], f"resume: resuming from {latest.parent} ({latest.read_text().strip()})"


def with_suffix(path: str, run_name: str) -> str:
    """`path` with its component named `run_name` renamed to run_name + SMOKE_SUFFIX."""
    parts = Path(path).parts
    return str(Path(*[p + SMOKE_SUFFIX if p == run_name else p for p in parts])) if parts else path


def smoke_layout(env: dict[str, str], argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """A smoke run's own directories: RUN_NAME + -smoke in the run's paths, so the real run's are never touched."""
    run = env.get("RUN_NAME") or ""
    if not run or run.endswith(SMOKE_SUFFIX):
        return [], {}
    flags = []
    for flag in ("--save_path", "--ckpt_path"):
        value = flag_value(argv, flag)
        if value:
            flags += [flag, with_suffix(value, run)]
    moved = {k: with_suffix(env[k], run) for k in SMOKE_PATH_ENV if env.get(k)}
    return flags, {"RUN_NAME": run + SMOKE_SUFFIX, **moved}


def decide(entry: str, argv: list[str], env: dict[str, str], fresh: bool = False) -> Decisions:
    """Every rft choice for one launch: `argv` is the script's flags (store_true negations applied); `fresh`: the
    command line said --no_load_checkpoint."""
    d = Decisions()
    smoke = switch(env, "SMOKE")
    if smoke:
        d.env["RFT_SMOKE"] = "1"
    if entry != "ppo":
        return d
    kind, path = reward_file(env)
    scheme = reward_scheme(env)
    d.flags += ["--remote_rm_url", str(path)]
    d.lines.append(f"reward: {kind} ({path}; scheme {scheme})")
    sync = lora_sync_flags(env, argv)
    d.flags += sync
    d.lines.append(f"LoRA sync: {env.get('LORA_SYNC') or 'merge'} ({' '.join(sync)})" if sync
                   else "LoRA sync: none (full-parameter training: OpenRLHF's own weight sync)")
    filt = filter_flags(env, kind, scheme)
    d.flags += filt
    history = ["--prompt_history"] if "--prompt_history" in argv else []
    d.lines.append(f"prompt filter: {' '.join(filt + history) if filt or history else 'off (DYNAMIC_FILTER=0)'}")
    det_env, line = determinism(argv)
    d.env.update(det_env)
    d.lines.append(line)
    resume, line = resume_flags(argv, smoke, fresh)
    d.flags += resume
    d.lines.append(line)
    if smoke:
        paths, moved = smoke_layout(env, argv)
        d.env.update(moved)
        d.lines.append(f"smoke run: SMOKE=1, its own directories ({moved.get('RUN_NAME', env.get('RUN_NAME', ''))})")
        d.tail += paths  # after the script's: its own paths would win otherwise (the last one given wins)
    else:
        d.lines.append("smoke run: no (SMOKE=1: a few steps that check the LoRA sync, then a verdict)")
    return d
