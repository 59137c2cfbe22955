"""Each published result's network, as its submission records it
(bert/plan/published_topology.json, one entry per result on more than one node).

Entered by hand, every fact with the file it was read from:
- NICs per node and their rate (Gb/s): the submission's system description,
  `systems/<system>.json`, the field that lists the compute NICs (`host_networking`, else
  `host_networking_topology` or `host_network_card_count`; for Gaudi2 the accelerator's own
  scale-out ports). null where the description names none: the kind's datasheet value is used.
- SHARP: on where the result's run configuration sets `export SBATCH_NETWORK=sharp` (Slurm's
  request for the switches' in-network reduction), off where the line is absent or commented
  out; null where the submission holds no configuration of that size (then a ring, as off).
The configuration is the one whose name, node count and per-GPU batch match the result.
One-node results need neither fact: their gradients never leave the node.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from bert.core.readers import read_json

DATA = Path(__file__).with_name("published_topology.json")


@lru_cache(maxsize=1)
def _entries() -> dict[str, dict]:
    return {
        e["id"]: e for e in read_json(DATA, "the published results' network facts", expect=list)
    }


def facts(row_id: str) -> dict | None:
    """The entry of the result `row_id` (scale.row_id), or None (a one-node result)."""
    return _entries().get(row_id)


def per_gpu_gbs(nics_per_node: int, nic_gbps: float, gpus_per_node: int) -> float:
    """GB/s of network each GPU's gradient shard has, one direction: the node's NICs shared by
    its GPUs (2 HDR 200 Gb/s NICs for 4 A100s: 12.5 GB/s each)."""
    return nics_per_node * nic_gbps / 8 / gpus_per_node


def cli_args(row_id: str) -> list[str]:
    """The planner flags that state this result's network (none for a one-node result, and no
    NIC flags where the system description names no NICs)."""
    e = facts(row_id)
    if e is None:
        return []
    out = ["--sharp"] if e["sharp"] else []
    if e["nics_per_node"]:
        out += ["--nics-per-node", str(e["nics_per_node"]), "--nic-gbps", f"{e['nic_gbps']:g}"]
    return out


def topology_args(row_id: str, gpus_per_node: int) -> dict:
    """Keyword arguments of planner.topology for this result: its SHARP and, where recorded, its
    network bandwidth per GPU."""
    e = facts(row_id)
    if e is None:
        return {}
    out = {"sharp": bool(e["sharp"])}
    if e["nics_per_node"]:
        out["network_gbs"] = per_gpu_gbs(e["nics_per_node"], e["nic_gbps"], gpus_per_node)
    return out


def labels(row_id: str) -> tuple[str, str]:
    """(network, SHARP) as the held-out table shows them: `8x400G` or `kind` (not recorded:
    the kind's datasheet value), `on`/`off`/`off?` (no configuration of that size); `-` on
    one node."""
    e = facts(row_id)
    if e is None:
        return "-", "-"
    net = f"{e['nics_per_node']}x{e['nic_gbps']:g}G" if e["nics_per_node"] else "kind"
    sharp = {True: "on", False: "off", None: "off?"}[e["sharp"]]
    return net, sharp
