"""A local Ray (2 CPUs) whose workers import the patched OpenRLHF, its stand-ins and the repository."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from rft.fixtures.patched_openrlhf import stub_paths
from rft.provenance import REPO_ROOT


def patched_ray(patched_openrlhf: Path) -> Iterator:
    """Start Ray with the workers' PYTHONPATH set (the driver's own is left as it was); yields ray, shuts it down."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    path = os.pathsep.join([str(patched_openrlhf), *map(str, stub_paths()), str(REPO_ROOT)])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path + (os.pathsep + old if old else "")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    yield ray
    ray.shutdown()
