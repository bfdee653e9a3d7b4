"""Two runs compared: metrics in every key but the times, samples byte for byte."""

import json
from pathlib import Path

from rft.monitor.reproduction import compare_metrics, compare_samples, is_time_key


def write_run(run_dir: Path, rows: list[dict], samples: dict[int, str]) -> Path:
    (run_dir / "metrics").mkdir(parents=True)
    (run_dir / "samples").mkdir()
    (run_dir / "metrics" / "training_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step, text in samples.items():
        (run_dir / "samples" / f"samples_step{step}.jsonl").write_text(text)
    return run_dir


def rows(offset: float = 0.0, reward3: float = 0.5) -> list[dict]:
    out = []
    for step in range(1, 5):
        out.append({"global_step": step, "timestamp": 1000 + step + offset, "reward": 0.1 * step if step != 3
                    else reward3, "lora_sync_seconds": 0.2 + offset, "time_generate": offset,
                    "judge_latency_s": offset})
    out.append({"global_step": 4, "event": "eval", "timestamp": 2000 + offset, "eval_demo_pass1": 0.25})
    return out


def test_the_times_are_the_only_keys_left_out():
    assert all(map(is_time_key, ("timestamp", "lora_sync_seconds", "time_generate", "judge_latency_s", "tokens_generated_per_s")))
    assert not any(map(is_time_key, ("reward", "kl", "eval_demo_pass1", "entropy_mean")))


def test_runs_that_differ_only_in_their_times_are_equal(tmp_path):
    a = write_run(tmp_path / "a", rows(), {10: "x\n"})
    b = write_run(tmp_path / "b", rows(offset=7.5), {10: "x\n"})
    m = compare_metrics(a, b)
    assert m.differences == [] and m.rows == 5 and m.keys == {"reward", "eval_demo_pass1"} and m.values == 5
    s = compare_samples(a, b)
    assert s.differences == [] and s.rows == 1
    assert m.summary() == "5 rows, 2 keys, 5 values compared: 0 differences"


def test_one_value_one_ulp_apart_is_a_difference(tmp_path):
    a = write_run(tmp_path / "a", rows(), {})
    b = write_run(tmp_path / "b", rows(reward3=0.5000000000000001), {})
    assert compare_metrics(a, b).differences == [("train step 3 reward", 0.5, 0.5000000000000001)]
    assert compare_metrics(a, b, from_step=4).differences == []  # steps before from_step are not compared


def test_a_missing_row_a_missing_key_and_a_differing_sample_file_are_named(tmp_path):
    short = rows()[:2] + [{**rows()[2], "extra": 1.0}]
    a = write_run(tmp_path / "a", rows(), {10: "x\n", 20: "y\n"})
    b = write_run(tmp_path / "b", short, {10: "x\n", 20: "z\n"})
    found = {d[0] for d in compare_metrics(a, b).differences}
    assert found == {"train row of step 4", "eval row of step 4", "train step 3 extra"}
    assert [d[0] for d in compare_samples(a, b).differences] == ["samples_step20.jsonl"]
    assert compare_samples(a, b, from_step=11).rows == 1


def test_a_repeated_step_counts_once_the_last_row_wins(tmp_path):
    resumed = rows()[:3] + [{"global_step": 3, "timestamp": 1, "reward": 0.5}] + rows()[3:]
    a = write_run(tmp_path / "a", rows(), {})
    b = write_run(tmp_path / "b", resumed, {})
    assert compare_metrics(a, b).differences == [] and compare_metrics(a, b).rows == 5
