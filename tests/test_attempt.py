"""rft.attempt: the attempt's record written into its note and the research log, the user's text untouched."""

from __future__ import annotations

import json
import shutil

import pytest

from rft.attempt import BEGIN, END, RecordError, main, replace_block, row_marker, upsert_row
from rft.launch.run_pointer import write_pointer
from rft.provenance import REPO_ROOT as ROOT
from tests.monitor.metric_logs import write_scenario
from tests.support.watch_state import write_watch_state

LOG = """# Research log

## 3. Attempt-by-attempt history

| Attempt | Branch / script | Change | Outcome |
|---|---|---|---|
| 28a / 28b | `a28a` | A/B | not recorded |
| 29 | `attempt-29-lr` | the user's own row | the user's words |

## 4. Metrics tables
"""


def test_block_is_appended_once_then_replaced_in_place():
    user = "# Attempt 29\n\n## Lessons\nmine\n"
    once = replace_block(user, "first")
    assert once.startswith(user) and once.endswith(f"{BEGIN}\nfirst\n{END}\n")
    edited = once.replace("## Lessons\nmine\n", "## Lessons\nmine, edited\n") + "after the block\n"
    twice = replace_block(edited, "second")
    assert twice == edited.replace(f"{BEGIN}\nfirst\n{END}", f"{BEGIN}\nsecond\n{END}")
    with pytest.raises(RecordError, match="marker"):
        replace_block(user + BEGIN + "\n", "x")


def test_row_goes_after_the_table_and_replaces_only_its_own():
    once = upsert_row(LOG, "29", "| 29 | `b` | c | first |")
    lines = once.split("\n")
    i = lines.index("| 29 | `attempt-29-lr` | the user's own row | the user's words |")
    assert lines[i + 1] == f"| 29 | `b` | c | first | {row_marker('29')}" and lines[i + 2] == ""
    twice = upsert_row(once, "29", "| 29 | `b` | c | second |")
    assert twice == once.replace("first |", "second |")
    assert "the user's words" in twice and twice.count(row_marker("29")) == 1
    with pytest.raises(RecordError, match="attempts table"):
        upsert_row("# nothing\n", "29", "| 29 |")


def test_the_command_writes_note_and_log_from_the_run_and_the_watch(tmp_path):
    repo = tmp_path / "repo"
    (repo / "notes").mkdir(parents=True)
    note = repo / "notes" / "attempt-29-lr.md"
    note.write_text("# Attempt 29: lr\n\n## Hypothesis\nthe user's hypothesis\n")
    (repo / "rl_grpo_research.md").write_text(LOG)
    metrics = write_scenario("healthy", tmp_path / "metrics")
    (metrics / "run_record_20261123T000000Z.json").write_text(
        json.dumps(
            {
                "git_sha": "abc123def4567",
                "branch": "attempt-29-lr",
                "started_utc": "2026-11-23T00:00",
                "chat_date": "2026-11-23",
                "ray_placement": {"roles": {"actor": ["n1aaaaaaaaaaaa"], "vllm": ["n2bbbbbbbbbbbb"]}},
            }
        )
    )
    ckpts = tmp_path / "ckpt"
    write_watch_state(ckpts)
    args = ["29", "--metrics", str(metrics), "--checkpoints", str(ckpts), "--repo", str(repo)]
    assert main(args) == 0
    text = note.read_text()
    assert text.startswith("# Attempt 29: lr\n\n## Hypothesis\nthe user's hypothesis\n")
    block = text[text.index(BEGIN) :]
    assert (
        "commit `abc123def456`" in block and "Ray placement: actor n1aaaaaaaaaa, vllm n2bbbbbbbbbb" in block
    )
    assert (
        "| metric | first | last |" in block and "| global_step10_hf | 10 | 60.0% [50.0%, 70.0%] |" in block
    )
    assert "best: global_step10_hf (step 10)" in block and "above base at 95%" in block
    log = (repo / "rl_grpo_research.md").read_text()
    row = next(line for line in log.splitlines() if row_marker("29") in line)
    assert row.startswith(
        "| 29 | `attempt-29-lr` | see [notes/attempt-29-lr.md](notes/attempt-29-lr.md) | steps 1-"
    )
    assert "best: global_step10_hf" in row and "the user's words" in log
    # the user edits both files; a second write replaces only the tool's parts
    note.write_text(text + "\n## Lessons\nwritten after the record\n")
    (repo / "rl_grpo_research.md").write_text(log.replace("not recorded", "A won"))
    assert main(args) == 0
    assert note.read_text().endswith("## Lessons\nwritten after the record\n")
    assert note.read_text().count(BEGIN) == 1
    assert "A won" in (repo / "rl_grpo_research.md").read_text()
    assert (repo / "rl_grpo_research.md").read_text().count(row_marker("29")) == 1



def test_the_run_is_found_from_the_launchs_pointer(tmp_path, monkeypatch, capsys):
    """Without --metrics: --run NAME's folders, else the latest run's, from runs/NAME/run.json; none is named."""
    monkeypatch.delenv("METRICS_LOG_DIR", raising=False)
    monkeypatch.delenv("CKPT_PATH", raising=False)
    repo = tmp_path / "repo"
    (repo / "notes").mkdir(parents=True)
    (repo / "notes" / "attempt-31-x.md").write_text("mine\n")
    shutil.copy(ROOT / "rl_grpo_research.md", repo / "rl_grpo_research.md")
    with pytest.raises(SystemExit):
        main(["31", "--repo", str(repo)])
    assert "no run launched from this checkout yet" in capsys.readouterr().err
    metrics = write_scenario("healthy", tmp_path / "m")
    write_pointer(repo, "a31", {"METRICS_LOG_DIR": str(metrics)}, ["--ckpt_path", str(tmp_path / "ckpt")])
    assert main(["31", "--repo", str(repo)]) == 2  # the run's checkpoints: no checkpoint_eval.json there yet
    assert f"{tmp_path / 'ckpt'}" in capsys.readouterr().err
    assert main(["31", "--run", "a31", "--repo", str(repo), "--checkpoints", ""]) == 0
    assert row_marker("31") in (repo / "rl_grpo_research.md").read_text()


def test_missing_note_or_watch_state_exits_2_and_writes_nothing(tmp_path, capsys):
    repo = tmp_path / "repo"
    (repo / "notes").mkdir(parents=True)
    shutil.copy(ROOT / "rl_grpo_research.md", repo / "rl_grpo_research.md")
    metrics = write_scenario("healthy", tmp_path / "m")
    assert main(["31", "--metrics", str(metrics), "--repo", str(repo), "--checkpoints", ""]) == 2
    assert "notes/attempt-31-*.md" in capsys.readouterr().err
    (repo / "notes" / "attempt-31-x.md").write_text("mine\n")
    assert main(["31", "--metrics", str(metrics), "--repo", str(repo), "--checkpoints", str(tmp_path)]) == 2
    assert "spare.py watch" in capsys.readouterr().err
    assert (repo / "notes" / "attempt-31-x.md").read_text() == "mine\n"
    assert (repo / "rl_grpo_research.md").read_text() == (ROOT / "rl_grpo_research.md").read_text()
    assert main(["31", "--metrics", str(metrics), "--repo", str(repo), "--checkpoints", ""]) == 0
    assert row_marker("31") in (repo / "rl_grpo_research.md").read_text()
