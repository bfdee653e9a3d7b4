"""`python -m rft.launch --profile 20b [--dry-run] -- <OpenRLHF flags>`: check, record, then exec OpenRLHF.

A removed variable still set refuses the launch first (`rft.plan.removed`). It resolves the command
(`--no_<flag>` pairs, rft's choices from `rft.launch.choices`) and runs every rule
(`rft.launch.rules`); with --dry-run it prints every decision, the command and the checks and exits; otherwise
it refuses a dirty git tree, tags `attempt-NN-start`, writes a run record (`rft.launch.record`) and the run's
pointer `runs/RUN_NAME/run.json` (`rft.launch.run_pointer`) and execs OpenRLHF. A smoke run and the CPU profile are supervised instead (`rft.launch.supervise`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from rft.io import flag_value
from rft.launch import cpu_profile
from rft.launch.choices import ChoiceError, Decisions, decide, with_suffix
from rft.launch.lock import LaunchLocked, acquire_all, check_free
from rft.launch.record import build_record, chat_date, git_state, tag_attempt, write_run_record
from rft.launch.rules import PROFILES, Profile, run_checks, sft_gpus, smoke_mode
from rft.launch.run_pointer import write_pointer
from rft.launch.smoke import relaunch_flags, smoke_flags, smoke_timeout
from rft.launch.smoke import resume_step as smoke_resume_step
from rft.launch.supervise import supervise
from rft.plan.memory_plan import render as memory_plan
from rft.plan.openrlhf_cli import FlagError, apply_negations, format_command, resolve_overrides
from rft.plan.removed import still_set
from rft.plan.step_time import FIGURES_ENV, step_block
from rft.provenance import REPO_ROOT, GitError
from rft.provision.caches import cache_env, cache_line

LOG_ENV = ("METRICS_LOG_DIR", "SAMPLES_LOG_DIR", "SPIKE_LOG_PATH", "RAY_ADDRESS", "CUDA_VISIBLE_DEVICES")


def run_dirs(flags: list[str]) -> list[Path]:
    """The directories one run owns: $METRICS_LOG_DIR and --ckpt_path (the launch lock goes in each)."""
    dirs = [os.environ.get("METRICS_LOG_DIR"), flag_value(flags, "--ckpt_path")]
    return [Path(d) for d in dirs if d]


def take_pool(rest: list[str]) -> tuple[list[str], int | None]:
    """`--pool N` (the LR preflight's pool size when --prompt_data is not on this machine) taken out of the
    OpenRLHF flags; the last one given wins. FlagError names a value that is not a whole number."""
    out, pool, i = [], None, 0
    while i < len(rest):
        if rest[i] == "--pool":
            value = rest[i + 1] if i + 1 < len(rest) else ""
            if not value.isdigit():
                raise FlagError(f"--pool {value}: expected the number of prompts")
            pool, i = int(value), i + 2
        else:
            out.append(rest[i])
            i += 1
    return out, pool


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
        help="REWARD=judge: skip the one live judge call made before any GPU work",
    )
    p.add_argument("--repo", default=str(REPO_ROOT), help="git repository to tag (default: this checkout)")
    p.add_argument("--run-dir", help="CPU profile: the run's directory (dashboard; default: METRICS_LOG_DIR/..)")
    p.add_argument("--supervised", action="store_true",
                   help="internal: the flags are final (a supervising launcher resolved them); check and exec")
    p.add_argument("openrlhf_args", nargs=argparse.REMAINDER, help="-- then the OpenRLHF flags")
    return p


def resolve_command(profile: Profile, rest: list[str], env: dict[str, str]) -> tuple[list[str], Decisions]:
    """The final OpenRLHF flags: rft's choices in front, `--no_<flag>` pairs resolved, the smoke rewrite."""
    entry = profile.entry
    fresh = "--no_load_checkpoint" in rest  # the negation is resolved away below; the dry run names it
    d = decide(entry, apply_negations(resolve_overrides(rest, entry), entry), env, fresh)
    if profile.cpu:
        d.tail += cpu_profile.NODE_FLAGS[cpu_profile.nodes(env)]
        d.lines += cpu_profile.plan_lines(rest, env)
    flags = resolve_overrides(apply_negations([*d.flags, *rest, *d.tail], entry), entry)
    if d.env.get("RFT_SMOKE") == "1" and entry == "ppo":
        flags = resolve_overrides(smoke_flags(flags), entry)
    return flags, d


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (execs OpenRLHF on a real launch)."""
    ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    rest = ns.openrlhf_args[1:] if ns.openrlhf_args[:1] == ["--"] else ns.openrlhf_args
    dry_run = ns.dry_run or "--dry-run" in rest
    judge_live = not (ns.no_judge_check or "--no-judge-check" in rest)
    try:
        rest, ns.pool = take_pool(rest)
    except FlagError as e:
        print(f"launch refused: {e}", file=sys.stderr)
        return 2
    rest = [t for t in rest if t not in ("--dry-run", "--no-judge-check")]
    profile = PROFILES[ns.profile]
    if leftovers := still_set(os.environ):  # before anything else, a dry run too
        print("\n".join(f"launch refused: {ln}" for ln in leftovers), file=sys.stderr)
        return 2
    if ns.supervised:
        rest = resolve_overrides(rest, profile.entry)
    else:
        try:
            if profile.cpu:
                cpu_profile.refuse_gpu_node()
            rest, decisions = resolve_command(profile, rest, dict(os.environ))
        except cpu_profile.GpuNode as e:
            print(e, file=sys.stderr)
            return 1
        except (ChoiceError, FlagError) as e:
            print(f"launch refused: {e}", file=sys.stderr)
            return 2
        if ns.run_dir and decisions.env.get("RUN_NAME"):  # a smoke run: its run directory too
            ns.run_dir = with_suffix(ns.run_dir, os.environ.get("RUN_NAME", ""))
        os.environ.update(decisions.env)
        if profile.data_disk:  # every process of the run inherits them: Ray workers, vLLM, DeepSpeed's op builds
            caches = cache_env(os.environ)
            os.environ.update(caches)
            decisions.lines.append(cache_line(caches))
        if profile.cpu:
            os.environ.update(cpu_profile.standin_env(dict(os.environ)))
        print("# decisions:\n" + "\n".join(f"  {ln}" for ln in decisions.lines), file=sys.stderr)
        if not dry_run and (profile.cpu or smoke_mode()):
            return _supervise(ns, profile, rest, judge_live)
    locks: list[int] = []
    if not dry_run:
        try:  # held through the exec below: the lock lives as long as the OpenRLHF driver
            locks = acquire_all(run_dirs(rest), os.environ.get("RUN_NAME", ""))
        except LaunchLocked as e:
            print(f"launch refused: {e}", file=sys.stderr)
            return 1
    try:
        return _check_and_launch(ns, profile, rest, dry_run, judge_live, dict(os.environ))
    finally:  # reached only without the exec: a refusal or RFT_LAUNCH_NO_EXEC
        for fd in locks:
            os.close(fd)


def _supervise(ns: argparse.Namespace, profile: Profile, rest: list[str], judge_live: bool) -> int:
    """A smoke run or the CPU profile: this launcher again as a child (`--supervised`), waited for here."""
    try:  # refused before anything is built or started; the child holds the lock for the run
        check_free(run_dirs(rest), os.environ.get("RUN_NAME", ""))
    except LaunchLocked as e:
        print(f"launch refused: {e}", file=sys.stderr)
        return 1
    child = [sys.executable, "-m", "rft.launch", "--profile", profile.name, "--supervised", "--repo", ns.repo,
             *([] if judge_live else ["--no-judge-check"]), "--", *rest,
             *([] if ns.pool is None else ["--pool", str(ns.pool)])]
    env = dict(os.environ)
    smoke = smoke_mode()
    k = smoke_resume_step() if smoke else 0
    resume = (k, relaunch_flags(rest)) if k else None
    deadline = smoke_timeout() if smoke else 0
    if not profile.cpu:
        return supervise(profile, child, env, smoke=True, resume=resume, deadline=deadline)
    metrics = Path(env["METRICS_LOG_DIR"])
    run_dir = Path(ns.run_dir) if ns.run_dir else metrics.parent
    try:
        cpu_profile.build_inputs(rest, env)
        with cpu_profile.private_ray(env) as address:
            env["RAY_ADDRESS"] = address
            cpu_profile.prepare_dirs(run_dir, env)
            return supervise(profile, child, env, smoke,
                             after=lambda status: cpu_profile.finish(status, run_dir, address, env),
                             resume=resume, deadline=deadline)
    except (subprocess.CalledProcessError, RuntimeError) as e:
        print(f"CPU profile: {e}", file=sys.stderr)
        return 1


def _check_and_launch(ns: argparse.Namespace, profile: Profile, rest: list[str], dry_run: bool,
                      judge_live: bool, env: dict[str, str]) -> int:
    """Run the checks on `env` (the environment, read once by main); print them (dry run) or refuse, tag,
    record and exec OpenRLHF."""
    prefix = command_prefix(profile)
    command = format_command(prefix, rest)
    rep, facts = run_checks(profile, rest, env, pool_if_absent=ns.pool, judge_live=judge_live)
    plan, fits = ("", None) if profile.cpu else memory_plan(rest, nodes=int(os.environ.get("NODES") or 1))
    if fits is False:
        rep.warnings.append("memory plan: the actor does not fit its GPUs by the estimate below "
                            "(--offload --adam_offload, or more actor GPUs)")
    # the CPU profile's tiny model has no stated figures: its step is predicted from a calibrated figures file only
    steps = "" if profile.cpu and not env.get(FIGURES_ENV) else step_block(
        rest, env.get(FIGURES_ENV), facts, rep.warnings, any_model=profile.cpu)
    repo = Path(ns.repo)
    try:
        state = git_state(repo, os.environ.get("ATTEMPT"))
    except GitError as e:
        state = None
        (rep.notes if profile.cpu or smoke_mode() else rep.blocking).append(f"git: {e}")
    untagged = profile.cpu or smoke_mode()  # the CPU demonstration and smoke runs are not attempts
    if state is not None and untagged:
        why = "CPU profile" if profile.cpu else "smoke run"
        rep.notes.append(f"git: {state.sha[:12]} on {state.branch} ({why}: no attempt tag, no clean-tree rule)")
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
        if plan:
            print(plan, file=sys.stderr)
        if steps:
            print(steps, file=sys.stderr)
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
    if plan:
        print(plan, file=sys.stderr)
    if steps:
        print(steps, file=sys.stderr)
    if rep.errors or rep.blocking:
        print(
            f"launch refused: {len(rep.errors) + len(rep.blocking)} problem(s) above; nothing was started",
            file=sys.stderr,
        )
        return 1
    assert state is not None or profile.cpu or smoke_mode()
    created = False if profile.cpu or smoke_mode() else tag_attempt(repo, state)
    record_dir = Path(os.environ.get("METRICS_LOG_DIR") or REPO_ROOT / "runs")
    record = build_record(profile.name, prefix + rest, command, state, created, facts,
                          dict(e.split("=", 1) for e in env_lines), date)
    path = write_run_record(record_dir, record)
    if os.environ.get("RUN_NAME"):  # monitor.sh, spare.py and rft.attempt find the run's folders from this
        write_pointer(repo, os.environ["RUN_NAME"], os.environ, rest)
    print(
        f"run record {path}" if profile.cpu or smoke_mode()
        else f"tag {state.tag} {'created' if created else 'already at HEAD (relaunch)'}; run record {path}",
        file=sys.stderr,
    )
    print(date_line, file=sys.stderr)
    print(command, flush=True)
    if os.environ.get("RFT_LAUNCH_NO_EXEC") == "1":  # tests of the workflow stop here
        return 0
    # a launch script started as a background job of a non-interactive shell has SIGINT ignored; the driver
    # gets it back, so `monitor.sh --end-on-stop` can interrupt it
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    argv = [*shlex.split(os.environ.get("RFT_LAUNCH_WRAPPER", "")), *prefix, *rest]  # the driver, or it wrapped
    os.execvp(argv[0], argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
