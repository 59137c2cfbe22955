"""Each published result's network (bert/plan/network.py, bert/plan/published_topology.json):
every multi-node result has its NICs and SHARP with the files they were read from, the scale
model reduces its gradients over them, and the held-out validation passes them to the CLI."""

from __future__ import annotations

import json
import re

import pytest

from bert.core import gpus
from bert.plan import network, scale, validate
from bert.plan.cli import main
from bert.plan.planner import row_topology

ROWS = {scale.row_id(r): r for r in scale.published_results()}
ENTRIES = json.loads(network.DATA.read_text())


def _row(folder: str) -> dict:
    (found,) = [r for i, r in ROWS.items() if folder in i]
    return found


def test_every_multi_node_result_has_an_entry_and_no_one_node_result_does():
    multi = {i for i, r in ROWS.items() if r["gpus"] > r["gpus_per_node"]}
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids)) and set(ids) == multi


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_each_fact_quotes_the_file_it_was_read_from(entry):
    row = ROWS[entry["id"]]
    repo = row["source"].split(":", 1)[0]  # the same repository and commit as the result's logs
    submitter, _, system, _ = row["source"].split(":", 1)[1].split("/")
    assert entry["network_source"].startswith(f"{repo}:{submitter}/systems/{system}.json ")
    if entry["nics_per_node"]:
        quoted = entry["network_source"].split(": ", 1)[1]
        assert re.search(rf"\b{entry['nics_per_node']}\s*x", quoted), quoted
        assert f"{entry['nic_gbps']:g}" in quoted, quoted
    if entry["sharp"] is None:
        assert "no run configuration" in entry["sharp_source"]
        return
    config, said = entry["sharp_source"].split(": ", 1)
    assert config.startswith(f"{repo}:{submitter}/benchmarks/bert/implementations/")
    assert config.endswith(".sh")
    assert ("export SBATCH_NETWORK=sharp" in said.split("; ")) == entry["sharp"]


def test_per_gpu_network_is_the_nodes_nics_shared_by_its_gpus():
    assert network.per_gpu_gbs(2, 200, 4) == 12.5  # 2 HDR NICs for 4 A100s
    assert network.per_gpu_gbs(8, 400, 8) == 50.0  # one NDR NIC per H100


def test_a_result_runs_on_its_recorded_network():
    dell = _row("Dell/results/16xXE8545x4A100-SXM-40GB")
    topo = row_topology(gpus.lookup(dell["gpu"]), dell)
    assert (topo.network_gbs, topo.sharp) == (12.5, True)
    gb200 = _row("tyche_ngpu512")  # SBATCH_NETWORK=sharp commented out in its configuration
    topo = row_topology(gpus.lookup("gb200"), gb200)
    assert (topo.network_gbs, topo.sharp, topo.nvlink_domain) == (50.0, False, 72)
    one_node = _row("v4.0:NVIDIA/results/h200_ngc23.09_pytorch")
    kind = gpus.lookup("h200")
    topo = row_topology(kind, one_node)
    assert (topo.network_gbs, topo.sharp) == (kind.network_gbs, False)
    dell_b200 = _row("2xXE9680Lx8B200")  # its system description names no NICs
    topo = row_topology(gpus.lookup("b200"), dell_b200)
    assert topo.network_gbs == gpus.lookup("b200").network_gbs


def test_validation_passes_the_network_to_the_cli():
    argv = validate.argv_for(_row("eos_n434"))
    assert "--sharp" in argv
    assert argv[argv.index("--nics-per-node") + 1] == "8"
    assert argv[argv.index("--nic-gbps") + 1] == "400"
    argv = validate.argv_for(_row("tyche_ngpu512"))
    assert "--sharp" not in argv and argv[argv.index("--nics-per-node") + 1] == "4"
    assert network.labels(scale.row_id(_row("tyche_ngpu512"))) == ("4x400G", "off")
    assert network.labels(scale.row_id(_row("2xXE9680Lx8B200"))) == ("kind", "off?")
    assert network.cli_args(scale.row_id(_row("v4.0:NVIDIA/results/h200_ngc23"))) == []


def _step_s(capsys, *extra: str) -> float:
    args = ["--gpus", "64", "--gpus-per-node", "4", "--gpu", "a100-40gb", "--batch", "3072"]
    assert main([*args, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["candidates"][0]["step_s"]


def test_nic_flags_and_sharp_change_the_reduction(capsys):
    datasheet = _step_s(capsys)  # one HDR NIC per A100: 25 GB/s each
    half = _step_s(capsys, "--nics-per-node", "2", "--nic-gbps", "200")  # 12.5 GB/s each
    shared = _step_s(capsys, "--nics-per-node", "2")  # the kind's 200 Gb/s NICs, 2 per node
    assert half > datasheet and half == pytest.approx(shared)
    assert _step_s(capsys, "--nics-per-node", "2", "--nic-gbps", "200", "--sharp") < half


def test_nic_flags_reach_the_flop_model_too(capsys):
    flop = ("--efficiency", "0.3")
    assert _step_s(capsys, *flop, "--nics-per-node", "2", "--nic-gbps", "200") > _step_s(
        capsys, *flop
    )
