"""Pre-launch checks shared by every launch script, the attempt workflow, and the hand-off to OpenRLHF.

`python -m rft.launch --profile 20b [--dry-run] -- <OpenRLHF flags>` resolves the command, checks flags (OpenRLHF's
own parser + validation, plus our gpt-oss rules), data, LR schedule, GPUs, disk and patches; with --dry-run it
prints the command and exits; otherwise it refuses a dirty git tree, tags `attempt-NN-start`, writes a run
record and execs OpenRLHF.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rft.io import atomic_write_json, iter_jsonl_lines, sha256_file
from rft.launch.judge_check import judge_rule
from rft.launch.lr_schedule import evaluate, report, schedule_from_args
from rft.launch.openrlhf_cli import OPENRLHF_DIR_ENV, FlagError, format_command, parse_args, resolve_overrides
from rft.problems import problem_hash

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3
PACKAGES = ("openrlhf", "vllm", "torch", "deepspeed", "ray", "transformers", "peft", "flash_attn", "rft")
LOG_ENV = ("METRICS_LOG_DIR", "SAMPLES_LOG_DIR", "SPIKE_LOG_PATH", "RAY_ADDRESS", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Profile:
    """What a launch script needs from the machine."""

    name: str
    entry: str  # "ppo" (Ray, train_ppo_ray) or "sft" (DeepSpeed launcher, train_sft)
    min_gpu_mem_gib: float
    min_free_disk_gib: float
    sft_gpus: int = 0  # GPUs the DeepSpeed launcher uses (sft only)
    cpu: bool = False  # the CPU demonstration: logical GPUs in a private Ray, no attempt tag, dirty tree allowed


PROFILES = {
    # H100 80GB reports ~79.6 GiB; 75 leaves room for driver differences but refuses 40/48 GB cards.
    "20b": Profile("20b", "ppo", min_gpu_mem_gib=75, min_free_disk_gib=50),
    "120b": Profile("120b", "ppo", min_gpu_mem_gib=75, min_free_disk_gib=100),
    "small": Profile("small", "ppo", min_gpu_mem_gib=20, min_free_disk_gib=10),
    "sft": Profile("sft", "sft", min_gpu_mem_gib=75, min_free_disk_gib=50, sft_gpus=8),
    # train_grpo_cpu.sh: a tiny random model on a machine without GPUs (what `make train` runs there)
    "cpu": Profile("cpu", "ppo", min_gpu_mem_gib=0, min_free_disk_gib=1, cpu=True),
}


@dataclass
class Report:
    """Check outcomes: errors always abort; `blocking` aborts a launch but not a dry run."""

    errors: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"  ok    {n}" for n in self.notes]
        lines += [f"  WARN  {w}" for w in self.warnings]
        lines += [f"  NEEDS {b}" for b in self.blocking]
        lines += [f"  ERROR {e}" for e in self.errors]
        return "\n".join(lines)


# ---------------------------------------------------------------- flag rules beyond OpenRLHF's own


def is_gpt_oss(pretrain: str | None) -> bool:
    """True for a gpt-oss checkpoint: by name, or by model_type in a local config.json."""
    if not pretrain:
        return False
    if re.search(r"gpt[-_]oss", pretrain, re.IGNORECASE):
        return True
    cfg = Path(pretrain) / "config.json"
    if cfg.is_file():
        try:
            return json.loads(cfg.read_text()).get("model_type") == "gpt_oss"
        except (OSError, json.JSONDecodeError):
            return False
    return False


def attention_rule(args: argparse.Namespace, argv: list[str]) -> tuple[list[str], list[str]]:
    """gpt-oss must keep its attention sinks: refuse flash_attention_2 / sdpa and --packing_samples."""
    if not is_gpt_oss(args.pretrain):
        return [], []
    if args.packing_samples:
        cause = "--packing_samples"
        for flag in ("--use_dynamic_batch", "--ring_attn_size"):
            if flag in argv and flag != "--packing_samples":
                cause = f"{flag} (which turns on --packing_samples)"
        return [
            f"{cause} with gpt-oss: OpenRLHF 0.9.3 then forces --attn_implementation flash_attention_2, which "
            "silently drops gpt-oss attention sinks (trainer and vLLM log-probs disagree, ratios explode); "
            "remove it and use --attn_implementation eager"
        ], []
    impl = args.attn_implementation
    if impl in ("flash_attention_2", "sdpa"):
        why = (
            "drops gpt-oss attention sinks" if impl == "flash_attention_2" else "is not supported for gpt-oss"
        )
        default = "" if "--attn_implementation" in argv else " (OpenRLHF's default)"
        return [f"--attn_implementation {impl}{default} {why}; use --attn_implementation eager"], []
    if impl != "eager":
        return [], [
            f"--attn_implementation {impl}: make sure it honours gpt-oss attention sinks in forward and backward"
        ]
    return [], []


def lora_sync_rule(args: argparse.Namespace, rep: Report) -> None:
    """Name the LoRA weight-sync mode the run will use (LORA_SYNC in the scripts); native needs a vLLM-sized rank."""
    if args.lora_rank <= 0 or not (args.vllm_num_engines or 0):
        return
    if getattr(args, "vllm_sync_lora_native", False):
        from rft.train.lora_native import vllm_max_lora_rank
        from rft.train.lora_sync import LoraSyncError

        try:
            rank = vllm_max_lora_rank(args.lora_rank)
        except LoraSyncError as e:
            rep.errors.append(f"LoRA sync native: {e}")
            return
        note = f"LoRA sync: native (vLLM enable_lora, max_lora_rank {rank}; the adapter is reloaded every step)"
        if is_gpt_oss(getattr(args, "vllm_pretrain", None) or args.pretrain):
            rep.warnings.append(
                "LoRA sync native on gpt-oss: enable_lora switches vLLM's MoE to its LoRA (Triton) experts, a "
                "kernel path not measured for speed or agreement here; compare vllm_kl with LORA_SYNC=merge"
            )
        rep.notes.append(note)
    elif getattr(args, "vllm_sync_lora_via_object_store", False):
        rep.notes.append("LoRA sync: merge (W0 + s·B@A written into the engines' weights every step)")


def looks_local(path: str | None) -> bool:
    """A filesystem path rather than a hub id (absolute, ./, ../ or ~)."""
    return bool(path) and path.startswith(("/", "./", "../", "~"))


def model_rule(a: argparse.Namespace, rep: Report) -> None:
    """The actor checkpoint (--pretrain) and the one vLLM serves (--vllm_pretrain): present, and how MXFP4 loads."""
    from rft.mxfp4 import is_mxfp4_checkpoint

    actor, served = a.pretrain, getattr(a, "vllm_pretrain", None) or a.pretrain
    if actor != served:
        rep.notes.append(f"model: actor/reference train from {actor}; vLLM serves {served}")
    path = Path(actor).expanduser() if actor else None
    if path is not None and looks_local(actor) and not (path / "config.json").is_file():
        hint = f"; make it with: python convert_mxfp4.py {served} {actor}" if actor != served else ""
        rep.blocking.append(f"model: --pretrain {actor} has no config.json{hint}")
    elif path is not None and path.is_dir() and is_mxfp4_checkpoint(path):
        rep.warnings.append(
            f"model: --pretrain {actor} is MXFP4: dequantized to bf16 at every start, rank 0 holding the whole bf16 "
            "model (2 bytes/parameter) in host RAM; a bf16 copy from convert_mxfp4.py avoids both"
        )


def placement_rules(a: argparse.Namespace) -> list[str]:
    """The placement assertions 0.9.3's train() makes after Ray starts, checked before."""
    errors = []
    if (a.colocate_actor_ref or a.colocate_all_models) and a.init_kl_coef > 0:
        if (a.actor_num_nodes, a.actor_num_gpus_per_node) != (a.ref_num_nodes, a.ref_num_gpus_per_node):
            errors.append(
                "--colocate_actor_ref/--colocate_all_models with --init_kl_coef > 0 needs --ref_num_nodes and "
                f"--ref_num_gpus_per_node equal to the actor's ({a.actor_num_nodes}x{a.actor_num_gpus_per_node}), "
                f"got {a.ref_num_nodes}x{a.ref_num_gpus_per_node}"
            )
    if a.colocate_all_models and not a.async_train and (a.vllm_num_engines or 0) > 0:
        actor, vllm = (
            a.actor_num_nodes * a.actor_num_gpus_per_node,
            a.vllm_num_engines * a.vllm_tensor_parallel_size,
        )
        if actor != vllm:
            errors.append(
                f"--colocate_all_models needs actor GPUs ({actor}) == --vllm_num_engines x "
                f"--vllm_tensor_parallel_size ({vllm})"
            )
    if getattr(a, "offload", False) and a.zero_stage != 3:
        errors.append("--offload (parameter offload) needs --zero_stage 3")
    return errors


def gpus_needed(a: argparse.Namespace) -> int:
    """GPUs the Ray placement of a train_ppo_ray command asks for."""
    shared = a.colocate_all_models
    actor = a.actor_num_nodes * a.actor_num_gpus_per_node
    vllm = (a.vllm_num_engines or 0) * a.vllm_tensor_parallel_size
    if shared and not a.async_train:
        vllm = 0
    ref = 0
    if a.init_kl_coef > 0 and not (a.colocate_actor_ref or shared):
        ref = a.ref_num_nodes * a.ref_num_gpus_per_node
    critic = 0 if not a.critic_pretrain or shared else a.critic_num_nodes * a.critic_num_gpus_per_node
    reward = 0
    if not a.remote_rm_url and not shared and not (a.critic_pretrain and a.colocate_critic_reward):
        reward = a.reward_num_nodes * a.reward_num_gpus_per_node
    return actor + vllm + ref + critic + reward


def eval_rule(a: argparse.Namespace) -> list[str]:
    """Greedy eval with n > 1 only measures vLLM nondeterminism (ops guide: never combine them)."""
    if getattr(a, "eval_dataset", None) and a.eval_temperature == 0 and a.eval_n_samples_per_prompt > 1:
        return [
            f"--eval_temperature 0 with --eval_n_samples_per_prompt {a.eval_n_samples_per_prompt}: near-identical "
            "samples; use n=1 for greedy_pass@1 or temperature 0.6 for sampling_pass@n"
        ]
    return []


# ---------------------------------------------------------------- data


def data_files(a: argparse.Namespace, entry: str) -> dict[str, list[str]]:
    """Local files the command reads, by role."""
    train = a.prompt_data if entry == "ppo" else a.dataset
    roles = {
        "train": [p.split("@")[0].strip() for p in (train or "").split(",") if p.strip()],
        "eval": [p.split("@")[0].strip() for p in (a.eval_dataset or "").split(",") if p.strip()],
    }
    if entry == "ppo" and a.remote_rm_url and a.remote_rm_url[0].endswith(".py"):
        roles["reward"] = [a.remote_rm_url[0]]
    return roles


MAX_UNLABELLED = 0.01  # rows without a label the run may carry (scored 0, counted as label_missing)


def scan_jsonl(path: str, keys: list[str], label_key: str | None = None) -> tuple[dict[str, str], list[str]]:
    """(problem_hash -> 'file:line' for every row, 'file:line' of rows without `label_key`).

    ValueError names file:line on a bad row; rows without a label are returned, not refused, unless more than
    MAX_UNLABELLED of the file lacks one.
    """
    seen: dict[str, str] = {}
    unlabelled: list[str] = []
    rows = 0
    for lineno, row in iter_jsonl_lines(path):
        rows += 1
        for key in keys:
            value = row.get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                if key == label_key:
                    unlabelled.append(f"{path}:{lineno}")
                    continue
                raise ValueError(
                    f"{path}:{lineno}: missing or empty key {key!r} (configured by the launch flags)"
                )
        text = row[keys[0]]
        if not isinstance(text, str):
            raise ValueError(f"{path}:{lineno}: {keys[0]!r} must be a string, got {type(text).__name__}")
        seen.setdefault(problem_hash(text), f"{path}:{lineno}")
    if not seen:
        raise ValueError(f"{path}: no rows")
    if len(unlabelled) > MAX_UNLABELLED * rows:
        raise ValueError(
            f"{unlabelled[0]}: missing or empty key {label_key!r} (configured by the launch flags); "
            f"{len(unlabelled)} of {rows} rows lack it (more than {MAX_UNLABELLED:.0%})"
        )
    return seen, unlabelled


def check_data(a: argparse.Namespace, entry: str, rep: Report) -> dict[str, str]:
    """Existence, keys and train/eval disjointness; returns {path: sha256} of the files found."""
    roles = data_files(a, entry)
    keys = [a.input_key] + ([a.label_key] if entry == "ppo" and a.label_key else [])
    if entry == "sft" and a.output_key:
        keys.append(a.output_key)
    hashes: dict[str, dict[str, str]] = {}
    digests: dict[str, str] = {}
    for role, paths in roles.items():
        for path in paths:
            if not os.path.isfile(path):
                rep.blocking.append(f"{role} file {path} not found")
                continue
            digests[path] = sha256_file(path)
            if role == "reward":
                continue
            if not path.endswith((".jsonl", ".json")):
                rep.errors.append(f"{path}: expected a local .jsonl file")
                continue
            try:
                seen, unlabelled = scan_jsonl(path, keys, a.label_key if entry == "ppo" else None)
            except ValueError as e:
                rep.errors.append(str(e))
                continue
            hashes.setdefault(role, {}).update(seen)
            if unlabelled:
                rep.warnings.append(
                    f"data: {len(unlabelled)} row(s) of {path} without {a.label_key!r} (e.g. {unlabelled[0]}): "
                    "the reward scores them 0 and the metrics count them as label_missing"
                )
            rep.notes.append(f"data: {path} ({role}) keys {keys} present")
    common = set(hashes.get("train", {})) & set(hashes.get("eval", {}))
    if common:
        ex = sorted(common)[:3]
        pairs = "; ".join(f"{hashes['train'][h]} = {hashes['eval'][h]}" for h in ex)
        rep.errors.append(f"train and eval share {len(common)} problems by problem_hash, e.g. {pairs}")
    elif "train" in hashes and "eval" in hashes:
        rep.notes.append(
            f"data: train ({len(hashes['train'])}) and eval ({len(hashes['eval'])}) disjoint by problem hash"
        )
    return digests


# ---------------------------------------------------------------- resources


def gpu_inventory() -> list[dict] | None:
    """[{index, name, memory_gib}] from nvidia-smi, or None when there is no usable nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    gpus = []
    for line in out.strip().splitlines():
        idx, name, mem = (x.strip() for x in line.split(",", 2))
        gpus.append({"index": int(idx), "name": name, "memory_gib": round(float(mem) / 1024, 1)})
    return gpus


def _gpu_label(g: dict) -> str:
    return f"{g['index']}:{g['name']} {g['memory_gib']} GiB"


def check_gpus(needed: int, profile: Profile, gpus: list[dict] | None, rep: Report) -> None:
    """GPU count and memory against the command's placement."""
    if gpus is None or not gpus:
        rep.blocking.append(
            f"GPUs: this launch needs {needed} GPU(s) with >= {profile.min_gpu_mem_gib:g} GiB each; nvidia-smi "
            "found none on this machine (use --dry-run to check the configuration here)"
        )
        return
    small = [g for g in gpus if g["memory_gib"] < profile.min_gpu_mem_gib]
    if small:
        rep.blocking.append(
            f"GPUs: {len(small)} GPU(s) below {profile.min_gpu_mem_gib:g} GiB "
            f"({', '.join(_gpu_label(g) for g in small)})"
        )
    if os.environ.get("RAY_ADDRESS"):
        rep.notes.append(
            f"GPUs: existing Ray cluster {os.environ['RAY_ADDRESS']}: {needed} needed, count not checked here"
        )
    elif len(gpus) < needed:
        rep.blocking.append(f"GPUs: the command places {needed} GPUs, this node has {len(gpus)}")
    else:
        rep.notes.append(
            f"GPUs: {len(gpus)} x {gpus[0]['name']} ({gpus[0]['memory_gib']} GiB), {needed} needed"
        )


def existing_ancestor(path: str) -> Path:
    """The nearest existing directory at or above `path`."""
    p = Path(path).expanduser().absolute()
    while not p.exists():
        p = p.parent
    return p


def free_gib(path: Path) -> float:
    """Free space, in GiB, of the filesystem holding `path` (which must exist)."""
    return shutil.disk_usage(path).free / GIB


def check_disk(paths: list[str], min_gib: float, rep: Report) -> None:
    """Free space where checkpoints and saved models go."""
    for path in paths:
        base = existing_ancestor(path)
        free = free_gib(base)
        msg = f"disk: {path} ({base}) has {free:.0f} GiB free"
        if free < min_gib:
            rep.blocking.append(f"{msg}, needs >= {min_gib:g} GiB")
        else:
            rep.notes.append(msg)


def patch_status() -> tuple[bool, str]:
    """(all applied, output) of `bash apply_patches.sh --check` for the interpreter that will train."""
    script = ROOT / "apply_patches.sh"
    if not script.is_file():
        return False, f"{script} not found"
    cmd = ["bash", str(script), "--check"]
    if os.environ.get(OPENRLHF_DIR_ENV):
        cmd += ["--target", os.environ[OPENRLHF_DIR_ENV]]
    env = {**os.environ, "PYTHON": sys.executable}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    return res.returncode == 0, (res.stdout + res.stderr).strip()


def patched_scratch_copy(dest: Path) -> Path | None:
    """Copy the installed openrlhf/ into `dest` and apply the patch series there; None if that fails."""
    from rft.launch.openrlhf_cli import openrlhf_root

    script = ROOT / "apply_patches.sh"
    if not script.is_file():
        return None
    shutil.copytree(
        openrlhf_root() / "openrlhf", dest / "openrlhf", ignore=shutil.ignore_patterns("__pycache__")
    )
    res = subprocess.run(
        ["bash", str(script), "--target", str(dest)], capture_output=True, text=True, cwd=ROOT
    )
    return dest if res.returncode == 0 else None


# ---------------------------------------------------------------- git / attempt workflow


class GitError(RuntimeError):
    """The repository is not in a state to launch from."""


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` and return stdout (GitError with stderr on failure)."""
    res = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout.rstrip("\n")


def attempt_number(branch: str, env_value: str | None) -> int:
    """NN from ATTEMPT=NN, else from a branch named attempt-NN-desc."""
    if env_value and env_value.strip():
        if not env_value.strip().isdigit():
            raise GitError(f"ATTEMPT={env_value!r} is not a number")
        return int(env_value)
    m = re.match(r"attempt-(\d+)(-|$)", branch)
    if not m:
        raise GitError(f"branch {branch!r} is not named attempt-NN-desc and ATTEMPT=NN is not set")
    return int(m.group(1))


def attempt_tag(n: int) -> str:
    return f"attempt-{n:02d}-start"


@dataclass
class GitState:
    sha: str
    branch: str
    dirty: list[str]
    attempt: int | None
    tag: str | None
    problem: str | None  # why a launch would be refused


def git_state(repo: Path, env_attempt: str | None) -> GitState:
    """Inspect the repository without changing it."""
    sha = git(repo, "rev-parse", "HEAD").strip()
    branch = git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    dirty = [ln for ln in git(repo, "status", "--porcelain", "--untracked-files=normal").splitlines() if ln]
    problem, n, tag = None, None, None
    try:
        n = attempt_number(branch, env_attempt)
        tag = attempt_tag(n)
        existing = git(repo, "tag", "--list", tag)
        if existing:
            at = git(repo, "rev-list", "-n", "1", tag)
            if at != sha:
                problem = (
                    f"tag {tag} already marks {at[:12]}, not HEAD {sha[:12]}: start a new attempt branch"
                )
    except GitError as e:
        problem = str(e)
    if dirty:
        problem = (
            f"working tree is dirty ({len(dirty)} change(s): {', '.join(d[3:] for d in dirty[:5])}); "
            "commit the configuration first"
        )
    return GitState(sha, branch, dirty, n, tag, problem)


def tag_attempt(repo: Path, state: GitState) -> bool:
    """Create the attempt tag at HEAD; False if it was already there (a relaunch/resume)."""
    if state.problem or not state.tag:
        raise GitError(state.problem or "no attempt tag")
    if git(repo, "tag", "--list", state.tag):
        return False
    git(repo, "tag", state.tag, state.sha)
    return True


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def chat_date(now: datetime.datetime | None = None) -> tuple[str, str | None]:
    """The date gpt-oss's chat template writes into every training prompt, and a warning near midnight.

    OpenRLHF 0.9.3 renders the training prompts once, minutes after launch, with no template kwargs, so the
    template's strftime_now takes the trainer's local date; eval_posthoc.py needs it as --chat-date.
    """
    now = now or datetime.datetime.now()
    date = now.strftime("%Y-%m-%d")
    if now.hour == 23 and now.minute >= 30:
        return date, (
            f"launched at {now:%H:%M} local time: prompts rendered after midnight carry the next day's date; "
            "check the date in the first samples_step file before using chat_date"
        )
    return date, None


def write_run_record(record_dir: Path, record: dict) -> Path:
    """Atomically write run_record_<UTC time>.json into `record_dir`."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = record_dir / f"run_record_{stamp}.json"
    atomic_write_json(path, record)
    return path


# ---------------------------------------------------------------- command and main


def command_prefix(profile: Profile) -> list[str]:
    """The launcher in front of the OpenRLHF flags."""
    if profile.entry == "ppo":
        return [sys.executable, "-m", "openrlhf.cli.train_ppo_ray"]
    ds = Path(sys.executable).with_name("deepspeed")
    return [
        str(ds) if ds.exists() else "deepspeed",
        "--num_gpus",
        str(sft_gpus(profile)),
        "--module",
        "openrlhf.cli.train_sft",
    ]


def sft_gpus(profile: Profile) -> int:
    """GPUs for the DeepSpeed launcher: NUM_GPUS from the environment, else the profile's."""
    value = os.environ.get("NUM_GPUS", "").strip()
    return int(value) if value.isdigit() else profile.sft_gpus


def run_checks(
    profile: Profile, argv: list[str], *, lr_pool: int | None = None, judge_live: bool = True
) -> tuple[Report, dict]:
    """Every check that does not change anything (but one live judge call with REWARD=judge); returns the
    report and facts for the run record."""
    rep = Report()
    facts: dict = {}
    patched, patch_out = patch_status()
    facts["patches"] = {"applied": patched, "check_output": patch_out}
    (rep.notes if patched else rep.blocking).append(
        "patches: all applied"
        if patched
        else f"patches: not all applied to the installed openrlhf (run bash apply_patches.sh): {patch_out.splitlines()[-1:]}"
    )
    where = "the installed (patched) OpenRLHF" if patched else "the installed OpenRLHF"
    with tempfile.TemporaryDirectory(prefix="rft-openrlhf-") as tmp:
        old = os.environ.get(OPENRLHF_DIR_ENV)
        if not patched and not old and patched_scratch_copy(Path(tmp)):
            os.environ[OPENRLHF_DIR_ENV] = tmp  # check the flags the patched library will have
            where = "a scratch copy of the installed OpenRLHF with the patch series applied"
        try:
            parsed = parse_args(argv, profile.entry)
        except FlagError as e:
            rep.errors.append(f"{e} (checked against {where})")
            return rep, facts
        finally:
            if old is None:
                os.environ.pop(OPENRLHF_DIR_ENV, None)
    a = parsed.args
    rep.notes.append(f"flags: accepted by OpenRLHF's own parser and validation ({profile.entry}), on {where}")
    rep.warnings += [f"OpenRLHF: {w}" for w in parsed.warnings]
    errs, warns = attention_rule(a, argv)
    rep.errors += errs
    rep.warnings += warns
    model_rule(a, rep)
    if profile.entry == "ppo":
        lora_sync_rule(a, rep)
        rep.errors += placement_rules(a)
        rep.warnings += eval_rule(a)
    facts["data_sha256"] = check_data(a, profile.entry, rep)
    sched = None
    if profile.entry == "ppo":
        env_pool = os.environ.get("POOL", "").strip()
        try:
            try:
                sched = schedule_from_args(a, lr_pool)
            except FileNotFoundError:
                if not env_pool.isdigit():
                    raise
                sched = schedule_from_args(a, int(env_pool))  # data not here: size it from POOL=N
                rep.warnings.append(f"LR preflight: pool taken from POOL={env_pool} (--prompt_data not found)")
        except (ValueError, FileNotFoundError) as e:
            rep.blocking.append(f"LR preflight: cannot size the pool ({e})")
        else:
            verdict = evaluate(sched)
            facts["lr_preflight"] = report(sched, verdict)
            rep.errors += [f"LR preflight: {e}" for e in verdict.errors]
            rep.warnings += [f"LR preflight: {w}" for w in verdict.warnings]
            if verdict.ok:
                rep.notes.append(
                    f"LR preflight: {sched.total_steps} scheduler steps, warm-up {sched.warmup_steps}, "
                    f"{sched.steps_per_rollout:g} per rollout step"
                )
        judge_rule(a, rep, sched.rollout_steps if sched is not None else None, live=judge_live)
        needed = gpus_needed(a)
    else:
        needed = sft_gpus(profile)
    if profile.cpu:
        rep.notes.append(f"GPUs: none used; {needed} logical GPU(s) in the private Ray on 127.0.0.1 (CPU profile)")
        if getattr(a, "vllm_sync_lora_skip", False):
            rep.warnings.append("--vllm_sync_lora_skip: the ablation run, rollouts stay on the base model")
    else:
        gpus = gpu_inventory()
        facts["gpus"] = gpus
        check_gpus(needed, profile, gpus, rep)
        if getattr(a, "vllm_sync_lora_skip", False):
            rep.errors.append("--vllm_sync_lora_skip is an ablation for the CPU profile: it would train nothing")
    check_disk([a.save_path, a.ckpt_path], profile.min_free_disk_gib, rep)
    return rep, facts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rft.launch",
        description="Check and launch one OpenRLHF training run. Everything after `--` is passed to OpenRLHF; "
        "a --dry-run anywhere in it is taken by this launcher.",
    )
    p.add_argument(
        "--profile", required=True, choices=sorted(PROFILES), help="machine needs of the launch script"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the resolved command and the checks; change nothing"
    )
    p.add_argument(
        "--no-judge-check",
        action="store_true",
        help="REWARD=judge: skip the one live judge call made before any GPU work (also JUDGE_LIVE_CHECK=0)",
    )
    p.add_argument("--repo", default=str(ROOT), help="git repository to tag (default: this checkout)")
    p.add_argument("openrlhf_args", nargs=argparse.REMAINDER, help="-- then the OpenRLHF flags")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (execs OpenRLHF on a real launch)."""
    ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    rest = ns.openrlhf_args[1:] if ns.openrlhf_args[:1] == ["--"] else ns.openrlhf_args
    dry_run = ns.dry_run or "--dry-run" in rest
    judge_live = not (ns.no_judge_check or "--no-judge-check" in rest)
    rest = [t for t in rest if t not in ("--dry-run", "--no-judge-check")]
    profile = PROFILES[ns.profile]
    rest = resolve_overrides(rest, profile.entry)
    prefix = command_prefix(profile)
    command = format_command(prefix, rest)
    rep, facts = run_checks(profile, rest, judge_live=judge_live)
    repo = Path(ns.repo)
    try:
        state = git_state(repo, os.environ.get("ATTEMPT"))
    except GitError as e:
        state = None
        (rep.notes if profile.cpu else rep.blocking).append(f"git: {e}")
    if state is not None and profile.cpu:
        rep.notes.append(f"git: {state.sha[:12]} on {state.branch} (CPU profile: no attempt tag, no clean-tree rule)")
    elif state is not None:
        if state.problem:
            rep.blocking.append(f"git: {state.problem}")
        else:
            rep.notes.append(f"git: clean at {state.sha[:12]} on {state.branch}; tag {state.tag}")
    env_lines = [f"{k}={os.environ[k]}" for k in LOG_ENV if os.environ.get(k)]

    date, date_warning = chat_date()
    if date_warning:
        rep.warnings.append(f"chat date: {date_warning}")
    date_line = (
        f"chat_date {date} (gpt-oss's chat template writes it into every training prompt; "
        f"evaluate with eval_posthoc.py --chat-date {date})"
    )

    if dry_run:
        print(command)
        print(f"# checks for profile {profile.name} (dry run):", file=sys.stderr)
        for e in env_lines:
            print(f"  env   {e}", file=sys.stderr)
        print(rep.render(), file=sys.stderr)
        print(f"  note  {date_line}, if launched now", file=sys.stderr)
        if "lr_preflight" in facts:
            print("# LR schedule:\n" + facts["lr_preflight"], file=sys.stderr)
        if rep.errors:
            print(f"dry run: {len(rep.errors)} error(s): the configuration would be refused", file=sys.stderr)
            return 1
        tail = (
            f"; a launch here would be refused until: {len(rep.blocking)} item(s) marked NEEDS"
            if rep.blocking
            else ""
        )
        print(f"dry run: configuration OK{tail}", file=sys.stderr)
        return 0

    print(rep.render(), file=sys.stderr)
    if rep.errors or rep.blocking:
        print(
            f"launch refused: {len(rep.errors) + len(rep.blocking)} problem(s) above; nothing was started",
            file=sys.stderr,
        )
        return 1
    assert state is not None or profile.cpu
    created = False if profile.cpu else tag_attempt(repo, state)
    record_dir = Path(os.environ.get("RUN_RECORD_DIR") or os.environ.get("METRICS_LOG_DIR") or ROOT / "runs")
    record = {
        "profile": profile.name,
        "command": prefix + rest,
        "command_text": command,
        "git_sha": state.sha if state else None,
        "branch": state.branch if state else None,
        "attempt_tag": state.tag if state else None,
        "tag_created": created,
        "data_sha256": facts.get("data_sha256", {}),
        "packages": package_versions(),
        "patches": facts.get("patches"),
        "gpus": facts.get("gpus"),
        "env": dict(e.split("=", 1) for e in env_lines),
        "host": socket.gethostname(),
        "started_utc": datetime.datetime.now(datetime.UTC).isoformat(),
        "started_local": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "chat_date": date,  # eval_posthoc.py --chat-date: the date rendered into the training prompts
        "lr_preflight": facts.get("lr_preflight"),
    }
    path = write_run_record(record_dir, record)
    print(
        f"run record {path}" if profile.cpu
        else f"tag {state.tag} {'created' if created else 'already at HEAD (relaunch)'}; run record {path}",
        file=sys.stderr,
    )
    print(date_line, file=sys.stderr)
    print(command, flush=True)
    if os.environ.get("RFT_LAUNCH_NO_EXEC") == "1":  # tests of the workflow stop here
        return 0
    os.execvp(prefix[0], prefix + rest)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
