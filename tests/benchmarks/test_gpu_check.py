"""`make gpu-check` (benchmarks/gpu_check.py): the tiny configuration end to end, on the bare machine's import path.

The whole check runs in a subprocess where deepspeed, ray, vllm, openrlhf, flash_attn and torchdata cannot be
found (as on a bare one-GPU machine); the report's content is then checked figure by figure. Mutants of the code it
measures (a TP placement, a dequantizer) must show in the figures.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from benchmarks import gpu_check, gpu_check_wheels
from benchmarks import gpu_check_phases as ph
from rft.provenance import REPO_ROOT as ROOT

ABSENT_ON_BARE_GPU = ("deepspeed", "ray", "vllm", "openrlhf", "flash_attn", "torchdata")
# what runs on the bare machine's own stack; the trainer phase needs the carried DeepSpeed and patched OpenRLHF
BARE_PHASES = [p for p in gpu_check.PHASES if p not in gpu_check.TRAINER_PHASES]

# Every finder answers "not found" for the absent packages, so find_spec is None and imports fail, as there.
RUN_BARE = """
import runpy, sys
ABSENT = set(sys.argv[1].split(","))
class Hide:
    def __init__(self, inner): self.inner = inner
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT: return None
        return self.inner.find_spec(name, path, target) if hasattr(self.inner, "find_spec") else None
    def __getattr__(self, a): return getattr(self.inner, a)
sys.meta_path[:] = [Hide(f) for f in sys.meta_path]
sys.argv = [sys.argv[2]] + sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-c", RUN_BARE, ",".join(ABSENT_ON_BARE_GPU), str(ROOT / "benchmarks/gpu_check.py"),
         "--out", str(out), "--timeout", "300", "--phases", *BARE_PHASES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=360,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    return report, (out / "gpu_check.md").read_text(), proc.stdout


def test_tiny_run_without_cuda_or_the_trainer_stack(tiny_run):
    report, md, stdout = tiny_run
    assert report["configuration"] == "tiny" and report["environment"]["device"] == "cpu"
    assert report["note"] == "no CUDA device: the tiny configuration ran"
    assert {n: p["status"] for n, p in report["phases"].items()} == dict.fromkeys(BARE_PHASES, "ok")
    assert report["seconds"] < report["timeout_s"]
    for name in BARE_PHASES:
        assert f"## {name}: ok" in md
    assert "gpu-check (tiny configuration)" in stdout and "plan: per-GPU total GiB" in stdout


def test_mxfp4_rows(tiny_run):
    mx = tiny_run[0]["phases"]["mxfp4"]
    s = ph.tiny_shape()
    assert mx["rft_exact"] and mx["transformers_exact"] and mx["load_exact"]
    load = mx["load"]
    assert load["expert_tensors"] == 4 and load["tensors"] > load["expert_tensors"]  # 2 layers: gate_up, down
    assert load["dequantized_on"] == ["cpu"] and load["ldexp_calls"] >= load["expert_tensors"]
    assert [r["elements"] for r in mx["rows"]] == [s.experts * 2 * s.intermediate * s.hidden,
                                                   s.experts * s.hidden * s.intermediate]
    for r in mx["rows"]:
        assert r["exact_in_bf16"] and r["transformers_vs_rft_equal"] and r["transformers_device"] == "cpu"
        assert r["rft_max_abs_err"] == 0.0 and r["transformers_s"] > 0 and r["rft_cpu_s"] > 0


def test_actor_rows_extrapolation_and_plan(tiny_run):
    actor = tiny_run[0]["phases"]["actor"]
    s = ph.tiny_shape()
    rows = actor["rows"]
    assert [r["layers"] for r in rows] == list(s.depths)
    r32 = s.lora_rank * ((s.hidden + s.heads * s.head_dim) * 2 + (s.hidden + s.kv_heads * s.head_dim) * 2)
    for r in rows:
        assert r["lora_params"] == r["layers"] * r32
        assert r["loss_finite"] and r["step_s"] > 0 and r["peak_gib"] is None  # no allocator figures on CPU
        assert r["tokens_per_s"] == pytest.approx(s.micro_batch * s.tokens / r["step_s"])
    (d1, t1), (d2, t2) = [(r["layers"], r["step_s"]) for r in rows]
    e20 = actor["extrapolated"]["gpt-oss-20b"]
    assert e20["layers"] == 24 and e20["step_s"] == pytest.approx(t2 + (t2 - t1) / (d2 - d1) * (24 - d2))
    assert e20["activation_gib"] is None
    assert e20["plan"] == ph.plan_figures(s, "gpt-oss-20b")
    assert "--micro_train_batch_size" in e20["plan"]["argv"] and str(s.tokens - s.prompt_len) in e20["plan"]["argv"]


def test_moe_eval_rows_on_cpu(tiny_run):
    moe = tiny_run[0]["phases"]["moe_eval"]
    s = ph.tiny_shape()
    assert [r["experts"] for r in moe["rows"]] == [s.experts, s.experts_120b]
    for r in moe["rows"]:  # transformers takes the per-expert loop on CPU in both modes: the same numbers
        assert not r["eval_dense_path"] and not r["train_dense_path"] and not r["routed_dense_path"]
        assert r["max_abs_gap"] == 0.0 and r["routed_max_abs_gap"] == 0.0 and r["tokens"] == s.tokens
    assert any("per-expert loop" in n for n in moe["notes"])


def test_merge_rows(tiny_run):
    mg = tiny_run[0]["phases"]["merge"]
    s = ph.tiny_shape()
    assert mg["exact"] and mg["within_one_ulp"] and mg["base_restored"] and mg["tp"] == 2
    assert [x["b_zero"] for x in mg["syncs"]] == [False, False, True]
    assert all(x["modules"] == 2 * 4 * mg["layers"] for x in mg["syncs"])  # every module on each of 2 ranks
    assert mg["syncs"][0]["max_abs_delta"] > 0 and mg["syncs"][2]["max_abs_delta"] == 0.0
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    assert mg["shard_shapes"]["model.layers.0.self_attn.qkv_proj.weight"] == [(q + 2 * kv) // 2, s.hidden]
    assert mg["shard_shapes"]["model.layers.0.self_attn.o_proj.weight"] == [s.hidden, q // 2]


def test_merge_check_sees_a_tp_placement_mutant(monkeypatch):
    """A loader-placement bug (every rank takes rank 0's rows) must show as mismatches, not pass."""
    import rft.train.lora_merge as lm

    def first_rows(t, dim, idx):
        n = (idx.stop - idx.start) if isinstance(idx, slice) else len(idx)
        return t.narrow(dim, 0, n)

    monkeypatch.setattr(lm, "_take", first_rows)
    res = ph.merge_tp2(ph.tiny_shape(), 1, torch.device("cpu"))
    assert res["syncs"][0]["mismatched"] > 0 and res["syncs"][0]["max_ulps"] > 1


def test_mxfp4_check_sees_an_inexact_dequantizer(monkeypatch):
    import rft.gptoss.mxfp4

    real = rft.gptoss.mxfp4.dequantize_expert
    monkeypatch.setattr(rft.gptoss.mxfp4, "dequantize_expert", lambda b, s: real(b, s) * 1.0078125)
    rows = ph.mxfp4_dequant(ph.tiny_shape(), torch.device("cpu"), 2)
    assert all(r["rft_mismatches"] > 0 and not r["transformers_vs_rft_equal"] for r in rows)
    assert all(r["transformers_mismatches"] == 0 for r in rows)


def test_real_shape_plan_is_the_recipes():
    """The 20b plan at the recipe's shapes is the 43.5 GiB per GPU the memory plan gives; RECIPES match the scripts."""
    f20 = ph.plan_figures(ph.real_shape(), "gpt-oss-20b")
    assert f20["per_gpu_total_gib"] == pytest.approx(43.5, abs=0.1)
    for model, script in (("gpt-oss-20b", "train_grpo_20b.sh"), ("gpt-oss-120b", "train_grpo_120b.sh")):
        # train_grpo_120b.sh runs over train_grpo_20b.sh: the 20b flags it does not override are its own
        text = (ROOT / script).read_text() + (ROOT / "train_grpo_20b.sh").read_text()
        flags = ph.RECIPES[model]
        for flag, value in zip(flags, flags[1:], strict=False):
            if flag.startswith("--") and not value.startswith("--"):
                assert re.search(rf"{flag}\s+{re.escape(value)}\b", text), (script, flag, value)
    s = ph.real_shape()
    assert (s.hidden, s.heads, s.kv_heads, s.head_dim, s.tokens, s.lora_rank, s.lora_alpha) == (
        2880, 64, 8, 64, 5120, 32, 64)


def test_bf16_ulp():
    x = torch.tensor([1.0, 1.5, -3.0, 0.0, 2.0**-130])
    assert ph.bf16_ulp(x).tolist()[:3] == [2.0**-7, 2.0**-7, 2.0**-6]
    one = torch.tensor([1.0]).bfloat16()
    assert float(torch.nextafter(one, torch.tensor([2.0]).bfloat16()) - one) == float(ph.bf16_ulp(one))


def test_a_phase_past_its_budget_keeps_its_rows_and_says_so(monkeypatch):
    def slow(shape, device, args, budget, out):
        out.setdefault("rows", []).append({"layers": 1})
        time.sleep(30)
        out["rows"].append({"layers": 2})
        return out

    monkeypatch.setitem(gpu_check.RUNNERS, "merge", slow)
    t0 = time.monotonic()
    res = gpu_check.run_phase("merge", 1.0, time.monotonic() + 100, None, None, None)
    assert time.monotonic() - t0 < 10
    assert res["status"] == "timeout" and res["rows"] == [{"layers": 1}] and "1 s budget" in res["reason"]
    report = {"configuration": "tiny", "environment": {"device": "cpu"}, "seconds": 1.0, "timeout_s": 5,
              "shape": ph.shape_dict(ph.tiny_shape()), "phases": {"merge": res}}
    md = gpu_check.markdown(report)
    assert "## merge: timeout" in md and "| layers |" in md and "| 1 |" in md
    assert gpu_check.run_phase("merge", 10, 0.0, None, None, None)["status"] == "skipped"  # --timeout spent


def test_attention_rows(tiny_run):
    """Every path at every length, or a note saying why not; the fp32 path is at least as close to the fp32
    reference as bf16 eager on average (a mask mix-up, an unmasked future, shows as a gap many times larger)."""
    att = tiny_run[0]["phases"]["attention"]
    from benchmarks import gpu_check_trainer as gt

    for path in ("eager", "rft_eager_fp32"):
        rows = {r["tokens"]: r for r in att["rows"] if r["path"] == path}
        assert sorted(rows) == list(gt.TINY_LENGTHS), path
        for r in rows.values():
            assert 0 <= r["expert_flip_share"] <= 1 and r["mean_abs_dlogp"] <= r["max_abs_dlogp"]
    eager = [r["mean_abs_dlogp"] for r in att["rows"] if r["path"] == "eager"]
    fp32 = [r["mean_abs_dlogp"] for r in att["rows"] if r["path"] == "rft_eager_fp32"]
    assert max(fp32) < 3 * max(eager) and max(eager) < 0.01
    flex = [r for r in att["rows"] if r["path"] == "rft_flex"]  # torch's unfused flex on the CPU
    assert len(flex) + len(att["notes"]) == len(gt.TINY_LENGTHS)


def test_budget_and_flags():
    # every phase's budget within the 8 minutes the check is given, with start-up room under --timeout
    assert sum(gpu_check.GPU_BUDGETS.values()) <= 8 * 60 + 150
    assert gpu_check.build_parser().parse_args(["--out", "x"]).timeout <= 8 * 60
    with pytest.raises(SystemExit):
        gpu_check.build_parser().parse_args(["--out", "x", "--depths", "2"])
    text = gpu_check.build_parser().format_help()
    for action in gpu_check.build_parser()._actions:
        assert action.help, action.dest
    assert "--timeout" in text and "--tiny" in text


def test_wheels_listing(tmp_path):
    pins = (ROOT / "pyproject.toml").read_text()
    for spec in gpu_check_wheels.WHEELS:
        if spec.split("==")[0] in ("transformers", "peft"):
            assert f'"{spec}"' in pins
    cmd = gpu_check_wheels.download_command(tmp_path)
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and "--no-deps" in cmd
    specs = (*gpu_check_wheels.WHEELS, gpu_check_wheels.DEEPSPEED)
    for spec in specs:
        name, version = spec.split("==")
        (tmp_path / f"{name}-{version}-py3-none-any.whl").write_bytes(b"x" * 1000)
    with pytest.raises(ValueError, match="openrlhf==0.9.3 with the series"):
        gpu_check_wheels.listing(tmp_path)
    (tmp_path / gpu_check_wheels.PATCHED_DIR).mkdir()
    (tmp_path / gpu_check_wheels.PATCHED_DIR / "x.py").write_bytes(b"x" * 500)
    found, total = gpu_check_wheels.listing(tmp_path)
    assert total == 1000 * len(specs) + 500 and len(found) == len(specs) + 1
    assert f"total ({len(specs) + 1} wheels)" in gpu_check_wheels.render(found, total)
    (tmp_path / "peft-0.17.1-py3-none-any.whl").unlink()
    with pytest.raises(ValueError, match="peft==0.17.1"):
        gpu_check_wheels.listing(tmp_path)
