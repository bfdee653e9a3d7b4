"""Which Ray node each role of a run ran on (actor, reference, vLLM engines, trainer), written into its run record.

`python -m rft.launch.placement --address ADDR --record-dir DIR` asks the cluster's GCS for the run's actors
(live or finished: the GCS keeps finished actors) and adds `ray_placement` to the newest `run_record_*.json` in
DIR: every node (id, IP, logical GPUs) and, per role, the node ids its actors ran on.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from rft.io import atomic_write_json
from rft.launch.record import newest_record

# OpenRLHF 0.9.3's Ray actor classes -> the role names of the run record
ROLES = {
    "PolicyModelActor": "actor",
    "ReferenceModelActor": "ref",
    "LLMRayActor": "vllm",
    "CriticModelActor": "critic",
    "RewardModelActor": "reward",
    "PPOTrainer": "trainer",
    "PPOTrainerAsync": "trainer",
    "TrainingActor": "trainer",  # --async_train: the trainer and the sampler are actors of their own
    "GenerateSamplesActor": "sampler",
}


def role_of(class_name: str) -> str | None:
    """The role of an OpenRLHF actor class (Ray may qualify the name: `module.Class`)."""
    return ROLES.get(class_name.rsplit(".", 1)[-1])


def roles_by_node(actors: Iterable[dict]) -> dict[str, list[str]]:
    """{role: sorted node ids} from GCS actor entries (`ActorClassName`, `Address.NodeID`)."""
    out: dict[str, set[str]] = {}
    for a in actors:
        role = role_of(a.get("ActorClassName") or "")
        node = (a.get("Address") or {}).get("NodeID")
        if role and node:
            out.setdefault(role, set()).add(node)
    return {role: sorted(nodes) for role, nodes in sorted(out.items())}


def split_roles(roles: dict[str, list[str]]) -> bool:
    """True when the actor and the vLLM engines ran on disjoint sets of nodes."""
    return (
        bool(roles.get("actor")) and bool(roles.get("vllm")) and not set(roles["actor"]) & set(roles["vllm"])
    )


def query(address: str) -> dict:
    """Nodes and role placement of the cluster at `address` (connects as a driver, then disconnects)."""
    import ray
    from ray._private import state

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        nodes = [
            {
                "node_id": n["NodeID"],
                "ip": n["NodeManagerAddress"],
                "gpus": n["Resources"].get("GPU", 0),
                "alive": n["Alive"],
            }
            for n in ray.nodes()
        ]
        roles = roles_by_node(state.actors().values())
    finally:
        ray.shutdown()
    return {"nodes": nodes, "roles": roles, "actor_and_vllm_on_different_nodes": split_roles(roles)}


def write_placement(record: Path, placement: dict) -> None:
    """Add `ray_placement` to the run record (atomic rewrite; every other key kept)."""
    data = json.loads(record.read_text(encoding="utf-8"))
    data["ray_placement"] = placement
    atomic_write_json(record, data)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rft.launch.placement", description=__doc__.splitlines()[0])
    p.add_argument("--address", required=True, help="the Ray cluster's GCS address (RAY_ADDRESS)")
    p.add_argument("--record-dir", required=True, type=Path, help="where the run's run_record_*.json is")
    a = p.parse_args(argv)
    record = newest_record(a.record_dir)
    if record is None:  # the launch was refused before the driver wrote its record: nothing ran, nothing to add
        print(f"placement: no run_record_*.json in {a.record_dir}: nothing recorded", file=sys.stderr)
        return 0
    placement = query(a.address)
    write_placement(record, placement)
    for role, nodes in placement["roles"].items():
        print(f"placement: {role} on node {', '.join(n[:12] for n in nodes)}", file=sys.stderr)
    print(f"placement: written to {record}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
