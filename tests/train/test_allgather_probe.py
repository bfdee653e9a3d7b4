"""rft.train.allgather_probe: the all-gather measured for real over 2 gloo processes, and the smoke's statement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rft.cpu.local_ray import free_port
from rft.plan.step_time import FIGURES, gather_floor, load_figures, predict
from rft.train.allgather_probe import transport_statement, zero3_shard_bytes
from tests.plan.test_step_time import RECIPE_20B

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "train" / "allgather_worker.py"
SHARD = 8 << 20  # 8 MiB a rank


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("allgather")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("RFT_DEVICE_FIGURES", None)
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(r), "2", str(port), str(SHARD), str(out / f"{r}.json")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    for p in procs:
        text, _ = p.communicate(timeout=240)
        assert p.returncode == 0, text
    return [json.loads((out / f"{r}.json").read_text()) for r in range(2)]


def test_two_gloo_ranks_measure_one_rate(ranks):
    """Both ranks report the slowest rank's time: the same positive rate; the shard is what was asked."""
    a, b = (r["measured"] for r in ranks)
    assert a["allgather_ranks"] == 2 and a["allgather_shard_mb"] == pytest.approx(SHARD / 1e6)
    assert a["allgather_s"] == b["allgather_s"] > 0 and a["allgather_gb_s"] == b["allgather_gb_s"] > 0
    assert a["allgather_gb_s"] == pytest.approx(SHARD * 1 / a["allgather_s"] / 1e9)


def test_the_probe_runs_once_with_the_models_figure_and_floor(ranks):
    probe = ranks[0]["probe"]
    pr = predict(RECIPE_20B, load_figures(None))
    assert probe["allgather_shard_mb"] == pytest.approx((2 * (64 * 64 + 64) * 2 // 2 // 2) / 1e6)
    assert probe["allgather_model_gb_s"] == FIGURES["allgather_bytes_s"].value / 1e9
    assert probe["allgather_floor_gb_s"] == pytest.approx(gather_floor(pr.shape, pr.recipe, pr.figures) / 1e9)
    assert ranks[0]["again"] == {} == ranks[1]["again"]


def test_the_statement_warns_below_the_floor_only():
    row = {"allgather_gb_s": 12.0, "allgather_ranks": 4, "allgather_shard_mb": 437, "allgather_model_gb_s": 360,
           "allgather_floor_gb_s": 28.8}
    low, text = transport_statement(row)
    assert low and "12.0 GB/s bus rate across 4 actor ranks" in text and "assumes 360 GB/s" in text
    assert "BELOW the floor 28.8 GB/s" in text
    assert transport_statement({**row, "allgather_gb_s": 150.0})[0] is False
    assert transport_statement({"allgather_gb_s": 1.0, "allgather_ranks": 2})[0] is False
    assert transport_statement({}) is None


def test_a_shard_is_one_layers_bf16_share_capped():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(100, 100), torch.nn.Linear(100, 100))
    model.config = type("C", (), {"num_hidden_layers": 2})()
    assert zero3_shard_bytes(model, 4) == 2 * 20200 // 2 // 4
    model.config.num_hidden_layers = None
    assert zero3_shard_bytes(model, 1) == 2 * 20200
