"""--loss_aggregation: the window factors (rft.train.loss_aggregation) and the property on the real trainer.

The property (tests/train/aggregation_worker.py, real patched ActorPPOTrainer, real ZeRO-3 on 1 and 2 gloo ranks):
one optimizer step's gradient is the same whether its 4 samples (response lengths 1, 8, 2, 5) arrive as micro-batches
of 1 or all at once, on 1 rank or 2. token_mean equals the plain-torch token mean of all samples; dr_grpo_constant
equals it times tokens / (generate_max_len x samples); microbatch_mean (0.9.3's loss) and the pristine 0.9.3 release
break it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from rft.cpu.local_ray import free_port
from rft.fixtures.patched_openrlhf import ROOT, stub_env
from rft.train.loss_aggregation import (
    aggregate,
    aggregation_in_force,
    default_aggregation,
    describe,
    validate,
    window_loss_scales,
)

WORKER = ROOT / "tests" / "train" / "aggregation_worker.py"
MODES = ("token_mean", "dr_grpo_constant", "microbatch_mean")


def test_defaults_follow_the_estimator_and_the_flag_wins():
    from argparse import Namespace

    assert default_aggregation("dr_grpo") == "dr_grpo_constant"
    assert default_aggregation("group_norm") == "token_mean"
    base = dict(advantage_estimator="dr_grpo", use_dynamic_batch=False, ring_attn_size=1, ds_tensor_parallel_size=1)
    assert aggregation_in_force(Namespace(loss_aggregation=None, **base)) == "dr_grpo_constant"
    assert aggregation_in_force(Namespace(loss_aggregation="microbatch_mean", **base)) == "microbatch_mean"
    # the window modes need plain data-parallel micro-batches: the default falls back, an explicit one is refused
    assert aggregation_in_force(Namespace(loss_aggregation=None, **{**base, "use_dynamic_batch": True})) == \
        "microbatch_mean"
    assert aggregation_in_force(Namespace(advantage_estimator="dr_grpo")) == "microbatch_mean"  # pristine: no flag
    with pytest.raises(ValueError, match="--use_dynamic_batch"):
        validate("token_mean", use_dynamic_batch=True, ring_attn_size=1, ds_tensor_parallel_size=1)
    with pytest.raises(ValueError, match="--ring_attn_size"):
        validate("dr_grpo_constant", use_dynamic_batch=False, ring_attn_size=2, ds_tensor_parallel_size=1)
    validate(None, use_dynamic_batch=True, ring_attn_size=2, ds_tensor_parallel_size=2)
    assert "1024 generate_max_len" in describe("dr_grpo_constant", 1024)


def test_window_scales_sum_tokens_per_optimizer_step_over_ranks():
    masks = [torch.ones(1, n) for n in (3, 5, 2, 6)]  # two windows of 2 micro-batches on this rank
    other_rank = torch.tensor([10.0, 0.0], dtype=torch.float64)
    scales = window_loss_scales(masks, 2, 2, "token_mean", 8, lambda t: t + other_rank)
    assert scales == pytest.approx([2 * 2 / 18, 2 * 2 / 18, 2 * 2 / 8, 2 * 2 / 8])
    dr = window_loss_scales(masks, 2, 2, "dr_grpo_constant", 8, lambda t: t * 2)  # both ranks: 2 samples a window
    assert dr == pytest.approx([4 / 32] * 4)
    assert window_loss_scales(masks, 2, 2, "microbatch_mean", 8, lambda t: 1 / 0) == [None] * 4


def test_aggregate_is_the_masked_sum_times_the_factor():
    loss = torch.tensor([[1.0, 2.0, 100.0]])
    mask = torch.tensor([[1, 1, 0]])
    assert float(aggregate(loss, mask, 0.5)) == pytest.approx(1.5)


def _run_workers(openrlhf_dir, out_dir, world: int, modes: tuple[str, ...]) -> dict:
    env = stub_env(openrlhf_dir)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(ROOT)])
    env.update(RFT_OPENRLHF_DIR=str(openrlhf_dir), OMP_NUM_THREADS="1")
    out = out_dir / f"world{world}.json"
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(r), str(world), str(port), str(out), *modes],
                              env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    try:
        outputs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for r, (p, text) in enumerate(zip(procs, outputs, strict=True)):
        assert p.returncode == 0, f"world {world} rank {r} failed:\n{text[-4000:]}"
    return json.loads(out.read_text())


def _flat(grads: dict) -> np.ndarray:
    return np.concatenate([np.asarray(grads[k]) for k in sorted(grads)])


@pytest.fixture(scope="module")
def runs(patched_openrlhf, tmp_path_factory):
    """{world: worker output} for 1 and 2 ranks, every mode, micro-batches of 1 and of all the rank's samples."""
    out = tmp_path_factory.mktemp("aggregation")
    return {w: _run_workers(patched_openrlhf, out, w, MODES) for w in (1, 2)}


def _configs(runs, mode):
    return {f"world{w}/{k.split('/')[1]}": _flat(v) for w, r in runs.items()
            for k, v in r["runs"].items() if k.startswith(mode + "/")}


@pytest.mark.slow
def test_token_mean_step_gradient_is_the_same_for_every_split_and_equals_the_token_mean(runs):
    grads = _configs(runs, "token_mean")
    assert set(grads) == {"world1/micro1", "world1/micro4", "world2/micro1", "world2/micro2"}
    reference = _flat(runs[1]["reference"])
    assert np.abs(reference).max() > 1e-3
    for name, g in grads.items():
        np.testing.assert_allclose(g, reference, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_dr_grpo_constant_is_the_token_sum_over_the_generation_budget_for_every_split(runs):
    from tests.train.aggregation_worker import MAX_RESPONSE, SAMPLES

    factor = runs[1]["tokens"] / (MAX_RESPONSE * SAMPLES)
    reference = _flat(runs[1]["reference"]) * factor
    for name, g in _configs(runs, "dr_grpo_constant").items():
        np.testing.assert_allclose(g, reference, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_microbatch_mean_keeps_0_9_3s_split_dependent_gradient(runs):
    grads = _configs(runs, "microbatch_mean")
    # all at once on one rank is the token mean; one sample per micro-batch weighs every response the same
    np.testing.assert_allclose(grads["world1/micro4"], _flat(runs[1]["reference"]), rtol=1e-4, atol=1e-6)
    gap = np.abs(grads["world1/micro1"] - grads["world1/micro4"]).max()
    assert gap > 1e-2 * np.abs(grads["world1/micro4"]).max()


@pytest.mark.slow
def test_pristine_0_9_3_fails_the_property(pristine_openrlhf_root, tmp_path):
    """The same run on the unpatched release: micro-batches of 1 and all at once give different steps."""
    result = _run_workers(pristine_openrlhf_root, tmp_path, 1, ("pristine",))
    one, all_at_once = _flat(result["runs"]["pristine/micro1"]), _flat(result["runs"]["pristine/micro4"])
    np.testing.assert_allclose(all_at_once, _flat(result["reference"]), rtol=1e-4, atol=1e-6)
    assert np.abs(one - all_at_once).max() > 1e-2 * np.abs(all_at_once).max()
