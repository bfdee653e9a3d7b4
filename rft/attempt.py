"""Write an attempt's record for the user: the run's summary, the checkpoint table and the best checkpoint.

`python -m rft.attempt [NN] --metrics DIR [--checkpoints RUN_DIR]` writes a marked block into the attempt note
(`notes/attempt-NN-*.md`) and one marked row into the attempts table of `rl_grpo_research.md`. Only text between
its own markers (the block) or carrying its own marker (the row) is ever replaced; everything the user wrote
stays as it was. Both files are rewritten atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rft.io import add_env_flag, atomic_write_text
from rft.launch.record import branch_attempt, newest_record
from rft.launch.run_pointer import resolve
from rft.provenance import REPO_ROOT, git

BEGIN = "<!-- rft:attempt-record begin: written by `python -m rft.attempt`; edits inside are replaced -->"
END = "<!-- rft:attempt-record end -->"
TABLE_HEADER = "| Attempt |"


class RecordError(RuntimeError):
    """The record cannot be written; the message says what to do."""


def row_marker(nn: str) -> str:
    """The marker that makes a research-log row this tool's own (replaced on the next write)."""
    return f"<!-- rft:attempt-{nn} -->"


def find_note(repo: Path, nn: str) -> Path:
    """The one note `notes/attempt-NN-*.md`."""
    notes = sorted((repo / "notes").glob(f"attempt-{nn}-*.md"))
    if len(notes) != 1:
        found = ", ".join(str(n) for n in notes) or "none"
        raise RecordError(
            f"expected one notes/attempt-{nn}-*.md, found {found} (bash new_attempt.sh {nn} DESC)"
        )
    return notes[0]


def replace_block(text: str, block: str) -> str:
    """`text` with the marked block replaced, or the block appended when there is none; nothing else changes."""
    body = f"{BEGIN}\n{block.rstrip()}\n{END}"
    start, end = text.find(BEGIN), text.find(END)
    if start != -1 and end != -1 and end > start:
        return text[:start] + body + text[end + len(END) :]
    if start != -1 or end != -1:
        raise RecordError("the note has one attempt-record marker without the other: restore or delete it")
    sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + sep + body + "\n"


def upsert_row(text: str, nn: str, row: str) -> str:
    """The attempts table with this tool's row for NN replaced, or inserted after the table's last row.

    A row the user wrote for the same attempt (no marker) stays; the tool's row goes after the table's rows.
    """
    marker = row_marker(nn)
    row = row.rstrip() + f" {marker}"
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if marker in line:
            lines[i] = row
            return "\n".join(lines)
    head = next((i for i, line in enumerate(lines) if line.startswith(TABLE_HEADER)), None)
    if head is None:
        raise RecordError(f"no attempts table (a line starting with {TABLE_HEADER!r}) in the research log")
    last = head + 1
    while last + 1 < len(lines) and lines[last + 1].startswith("|"):
        last += 1
    lines.insert(last + 1, row)
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def run_summary(metrics_dir: Path) -> tuple[str, dict]:
    """(markdown: the monitor's summary and verdicts, facts for the row: steps, reward, stop verdict)."""
    from rft.monitor.diagnosis import diagnose
    from rft.monitor.logs import read_metrics, read_spikes, spike_log_path
    from rft.monitor.table import markdown_summary

    log = read_metrics(metrics_dir)
    spikes, _ = read_spikes(spike_log_path(metrics_dir))
    verdicts = diagnose(log, spikes)
    steps = log.train_steps()
    reward = log.values("reward_mean")
    worst = [v for v in verdicts if v.status in ("FAIL", "STOP")]
    facts = {
        "steps": f"{steps[0]}-{steps[-1]}" if steps else "none",
        "reward": f"{reward[0]:.3f} -> {reward[-1]:.3f}" if reward else "n/a",
        "stop": "; ".join(f"{v.status} {v.check}" for v in worst) or "no FAIL/STOP verdict",
    }
    return markdown_summary(log, verdicts), facts


def checkpoint_part(run_dir: Path | None) -> tuple[str, str]:
    """(the checkpoint table with its best line, the best line) from `spare.py watch`'s outputs."""
    if run_dir is None:
        return "", "no checkpoint evaluation"
    from rft.spare.watch import STATE_NAME, best_line, table_markdown

    state_path = run_dir / STATE_NAME
    if not state_path.is_file():
        raise RecordError(f"{state_path} not found: run `python spare.py watch {run_dir} -- ...` first")
    state = json.loads(state_path.read_text(encoding="utf-8"))
    return table_markdown(state, run_dir.name), best_line(state)


def build_block(nn: str, record: dict, summary_md: str, ckpt_md: str, stop: dict | None) -> str:
    """The note's block: run facts, the monitor summary, the checkpoint table and best line."""
    lines = [f"## Record of attempt {nn} (generated)", ""]
    if record:
        lines += [
            f"- Run record: commit `{str(record.get('git_sha') or '?')[:12]}`, started "
            f"{record.get('started_utc', '?')}, chat_date `{record.get('chat_date', '?')}`",
        ]
        placement = record.get("ray_placement")
        if placement:
            roles = ", ".join(
                f"{r} {', '.join(n[:12] for n in ids)}" for r, ids in placement["roles"].items()
            )
            lines.append(f"- Ray placement: {roles}")
    if stop:
        lines.append(
            f"- Ended by the monitor: {stop.get('reason', '?')} (after step {stop.get('step', '?')})"
        )
    lines += ["", "### Run summary (`monitor.sh --table`)", "", summary_md.rstrip(), ""]
    if ckpt_md:
        lines += [ckpt_md.rstrip(), ""]
    return "\n".join(lines)


def write_record(
    repo: Path, nn: str, metrics_dir: Path, checkpoints: Path | None, log_path: Path | None = None
) -> tuple[Path, Path]:
    """Write the note's block and the research log's row; returns both paths."""
    note = find_note(repo, nn)
    research = log_path or repo / "rl_grpo_research.md"
    summary_md, facts = run_summary(metrics_dir)
    path = newest_record(metrics_dir)
    record = json.loads(path.read_text(encoding="utf-8")) if path else {}
    ckpt_md, best = checkpoint_part(checkpoints)
    stop = record.get("stopped_by_monitor")
    block = build_block(nn, record, summary_md, ckpt_md, stop)
    rel_note = note.relative_to(repo)
    outcome = f"steps {facts['steps']}, reward {facts['reward']}; {facts['stop']}; {best}"
    if stop:
        outcome += f"; ended on STOP after step {stop.get('step', '?')}"
    branch = record.get("branch") or note.stem
    row = f"| {nn} | `{_cell(branch)}` | see [{rel_note}]({rel_note}) | {_cell(outcome)} |"
    new_log = upsert_row(research.read_text(encoding="utf-8"), nn, row)
    new_note = replace_block(note.read_text(encoding="utf-8"), block)
    atomic_write_text(note, new_note)
    atomic_write_text(research, new_log)
    return note, research


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rft.attempt", description=__doc__.splitlines()[0])
    p.add_argument("attempt", nargs="?", help="NN (default: from the branch attempt-NN-desc)")
    add_env_flag(p, "--metrics", "METRICS_LOG_DIR", "the run's metrics directory",
                 otherwise=", else --run's, else the latest run's of this checkout")
    add_env_flag(p, "--checkpoints", "CKPT_PATH", "the directory `spare.py watch` wrote checkpoint_eval.json into",
                 otherwise=", else the run's --ckpt_path; '' for none")
    p.add_argument("--run", metavar="RUN_NAME", help="the run of this checkout named so (runs/RUN_NAME/run.json, "
                   "written by the launch): its metrics and checkpoint directories")
    p.add_argument(
        "--repo", default=str(REPO_ROOT), help="the checkout holding notes/ and rl_grpo_research.md"
    )
    a = p.parse_args(argv)
    repo = Path(a.repo)
    nn = a.attempt or branch_attempt(git(repo, "rev-parse", "--abbrev-ref", "HEAD", check=False))
    if not nn:
        p.error("no attempt number: pass NN or run on a branch attempt-NN-desc")
    if a.run or not a.metrics:
        try:
            run = resolve(repo, a.run)
        except (FileNotFoundError, ValueError) as e:
            p.error(f"no metrics directory: pass --metrics DIR, --run RUN_NAME or set METRICS_LOG_DIR ({e})")
        a.metrics = str(run.metrics_dir)
        if a.checkpoints is None and run.ckpt_path:
            a.checkpoints = str(run.ckpt_path)
    try:
        note, research = write_record(
            repo, nn, Path(a.metrics), Path(a.checkpoints) if a.checkpoints else None
        )
    except (RecordError, FileNotFoundError) as e:
        print(f"rft.attempt: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote the record of attempt {nn} into {note} and {research}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
