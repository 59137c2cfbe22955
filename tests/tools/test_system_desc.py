"""The system description of a package (bert/submission/system_desc.py): read from the machine's
/proc, /sys and /etc (fake trees here, one per kind of machine), from the logs' topology keys
and torch.cuda (a fake device here), with the caller's flags, --field and --system-json on top.
Every field is a string: the official system_desc_checker joins them.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from types import SimpleNamespace

import pytest

# The packaging scripts read logs with mlperf-logging; where it is absent (the bare GPU image)
# these tests skip instead of failing the collection of the whole suite.
pytest.importorskip("mlperf_logging")
import torch

from bert.submission import reader as run_logs
from bert.submission import system_desc as sd
from bert.submission.system_desc import cpu_model


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def cpuinfo(processors: list[dict[str, str]]) -> str:
    return "\n".join("".join(f"{k}\t: {v}\n" for k, v in p.items()) for p in processors)


XEON = "Intel(R) Xeon(R) Platinum 8480+"
DUAL_SOCKET = {  # 2 sockets x 2 cores x 2 threads
    "proc/cpuinfo": cpuinfo(
        [
            {
                "processor": str(i),
                "model name": XEON,
                "cpu MHz": "2000.000",
                "cache size": "107520 KB",
                "physical id": str(i // 4),
                "core id": str(i // 2 % 2),
                "cpu cores": "2",
            }
            for i in range(8)
        ]
    ),
    "proc/meminfo": "MemTotal:       2113929216 kB\nMemFree:        1 kB\n",
    "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "3800000\n",
    **{
        f"sys/devices/system/cpu/cpu0/cache/index{i}/{k}": v
        for i, (level, kind, size) in enumerate(
            [
                ("1", "Data", "48K"),
                ("1", "Instruction", "32K"),
                ("2", "Unified", "2048K"),
                ("3", "Unified", "107520K"),
            ]
        )
        for k, v in (("level", level), ("type", kind), ("size", size))
    },
    "sys/block/nvme0n1/size": "7501476528\n",
    "sys/block/nvme0n1/queue/rotational": "0\n",
    "sys/block/sda/size": "1953525168\n",
    "sys/block/sda/queue/rotational": "1\n",
    "sys/block/loop0/size": "1000\n",
    "sys/block/loop0/queue/rotational": "0\n",
    "etc/os-release": 'NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n',
}
ARM = {  # no model name nor topology in cpuinfo; sysfs knows the topology
    "proc/cpuinfo": cpuinfo([{"processor": str(i), "BogoMIPS": "50.00"} for i in range(4)]),
    **{
        f"sys/devices/system/cpu/cpu{i}/topology/{k}": v
        for i in range(4)
        for k, v in (("physical_package_id", "0"), ("core_id", str(i)))
    },
}
VM = {  # one virtual socket; the clock only in the model name
    "proc/cpuinfo": cpuinfo(
        [
            {
                "processor": str(i),
                "model name": "Intel Xeon @ 2.50GHz",
                "physical id": "0",
                "core id": str(i),
            }
            for i in range(2)
        ]
    ),
    "sys/block/vda/size": "536870912\n",
    "sys/block/vda/queue/rotational": "1\n",
}

HOSTS = {
    # name: (files, expected fields)
    "dual socket": (
        DUAL_SOCKET,
        {
            "host_processors_per_node": "2",
            "host_processor_model_name": XEON,
            "host_processor_core_count": "4",
            "host_processor_vcpu_count": "8",
            "host_processor_frequency": "3.80 GHz (max)",
            "host_processor_caches": "L1d 48 KiB, L1i 32 KiB, L2 2 MiB, L3 105 MiB",
            "host_memory_capacity": "2 TiB",
            "host_storage_type": "1x NVMe SSD, 1x HDD",
            "host_storage_capacity": f"{(7501476528 + 1953525168) * 512 / 1e9:.0f} GB",
            "operating_system": f"Ubuntu 22.04.4 LTS, {platform.system()} {platform.release()}",
        },
    ),
    "arm": (
        ARM,
        {
            "host_processors_per_node": "1",
            "host_processor_model_name": "unknown",
            "host_processor_core_count": "4",
            "host_processor_vcpu_count": "4",
            "host_processor_frequency": "unknown",
            "host_processor_caches": "unknown",
            "host_memory_capacity": "unknown",
            "host_storage_type": "unknown",
        },
    ),
    "vm": (
        VM,
        {
            "host_processors_per_node": "1",
            "host_processor_core_count": "2",
            "host_processor_frequency": "2.50GHz",
            "host_storage_type": "1x virtual disk",
            "host_storage_capacity": "275 GB",
        },
    ),
    "nothing readable": (
        {},
        {
            "host_processors_per_node": "unknown",
            "host_processor_model_name": "unknown",
            "host_processor_core_count": "unknown",
            "host_processor_vcpu_count": "unknown",
            "host_processor_frequency": "unknown",
            "host_memory_capacity": "unknown",
            "host_storage_capacity": "unknown",
            "operating_system": f"{platform.system()} {platform.release()}",
        },
    ),
}


@pytest.mark.parametrize("host", HOSTS)
def test_host_fields(tmp_path, host):
    files, expected = HOSTS[host]
    root = tree(tmp_path, files)
    fields = sd.host_fields(root / "proc", root / "sys", root / "etc")
    assert {k: fields[k] for k in expected} == expected
    # nothing on a machine tells these
    for name in ("host_processor_interconnect", "host_memory_configuration", "cooling"):
        assert fields[name] == "unknown"


def test_host_fields_of_this_machine():
    fields = sd.host_fields()
    assert fields["host_processor_model_name"] == (cpu_model() or "unknown")
    assert fields["host_processor_vcpu_count"] == str(
        Path("/proc/cpuinfo").read_text().count("processor\t:")
    )
    assert fields["host_memory_capacity"].endswith("iB")


class FakeCuda:
    """torch.cuda as far as the description asks it."""

    def __init__(self, name="NVIDIA H100 80GB HBM3", count=8):
        self.name, self.count = name, count

    def device_count(self):
        return self.count

    def get_device_name(self, index):
        return self.name

    def get_device_properties(self, index):
        return SimpleNamespace(
            total_memory=85_520_809_984, clock_rate=1_980_000, L2_cache_size=50 * 2**20
        )


ACCELERATORS = {
    # name: (per node, model, cuda, expected)
    "cpu run": (
        0,
        None,
        None,
        {"accelerators_per_node": "0", **{f: "N/A" for f in sd.ACCELERATOR_FIELDS}},
    ),
    "this host's gpu": (
        8,
        "NVIDIA H100 80GB HBM3",
        FakeCuda(),
        {
            "accelerators_per_node": "8",
            "accelerator_model_name": "NVIDIA H100 80GB HBM3",
            "accelerator_memory_capacity": "79.6 GiB",
            "accelerator_frequency": "1980 MHz",
            "accelerator_on-chip_memories": "L2 50 MiB",
            "accelerator_interconnect": "unknown",
        },
    ),
    "another gpu": (
        4,
        "NVIDIA A100-SXM4-80GB",
        FakeCuda(),
        {
            "accelerators_per_node": "4",
            "accelerator_model_name": "NVIDIA A100-SXM4-80GB",
            "accelerator_memory_capacity": "unknown",
            "accelerator_frequency": "unknown",
        },
    ),
    "gpu, no cuda here": (
        8,
        "NVIDIA A100-SXM4-80GB",
        None,
        {"accelerators_per_node": "8", "accelerator_memory_capacity": "unknown"},
    ),
}


@pytest.mark.parametrize("case", ACCELERATORS)
def test_accelerator_fields(case):
    per_node, model, cuda, expected = ACCELERATORS[case]
    fields = sd.accelerator_fields(per_node, model, cuda)
    assert {k: fields[k] for k in expected} == expected
    assert set(fields) == {"accelerators_per_node", *sd.ACCELERATOR_FIELDS}


def test_software_fields():
    fields = sd.software_fields()
    assert fields["framework"] == f"PyTorch {torch.__version__}"
    stack = fields["other_software_stack"]
    assert stack.startswith(f"Python {platform.python_version()}")
    assert ("CUDA " in stack) == bool(torch.version.cuda)
    assert ("CPU-only PyTorch build" in stack) == (not torch.version.cuda)


@pytest.mark.parametrize(
    "number,text", [(90100, "9.1.0"), (91002, "9.10.2"), (8907, "8.9.7"), (7605, "7.6.5")]
)
def test_cudnn_version(number, text):
    assert sd.cudnn_version(number) == text


# -- the whole description ------------------------------------------------------------------------


def args(**overrides) -> SimpleNamespace:
    base = dict(
        system="sys1",
        submitter=None,
        division=None,
        nodes=None,
        accelerators_per_node=None,
        accelerator=None,
        field=[],
        system_json=None,
    )
    return SimpleNamespace(**{**base, **overrides})


def runs(topology: dict[str, str] | None = None, n: int = 2) -> list:
    return [
        run_logs.Run(
            Path(f"result_{i}.txt"),
            i,
            True,
            "success",
            1.0,
            "org",
            "closed",
            "onprem",
            448,
            None,
            dict(topology or {}),
        )
        for i in range(n)
    ]


LOGGED = {
    "number_of_nodes": "2",
    "accelerators_per_node": "8",
    "accelerator_model_name": "NVIDIA H100 80GB HBM3",
}
DESCRIBE = {
    # name: (args, logged topology, cuda, expected fields, fragment of the "system:" line)
    "cpu run on this cpu host": (
        args(),
        {},
        None,
        {
            "number_of_nodes": "1",
            "accelerators_per_node": "0",
            "accelerator_model_name": "N/A",
            "host_networking": "N/A",
        },
        "a CPU run: the logs do not say",
    ),
    "the logs say": (
        args(),
        LOGGED,
        None,
        {
            "number_of_nodes": "2",
            "accelerators_per_node": "8",
            "accelerator_model_name": "NVIDIA H100 80GB HBM3",
            "host_networking": "unknown",
        },
        "from the logs",
    ),
    "the logs say, same gpu here": (
        args(),
        LOGGED,
        FakeCuda(),
        {"accelerator_memory_capacity": "79.6 GiB"},
        "from the logs",
    ),
    "flags win over the logs": (
        args(nodes=1, accelerators_per_node=4, accelerator="NVIDIA A100-SXM4-80GB"),
        LOGGED,
        None,
        {
            "number_of_nodes": "1",
            "accelerators_per_node": "4",
            "accelerator_model_name": "NVIDIA A100-SXM4-80GB",
        },
        "from --accelerators-per-node",
    ),
    "gpu host, the logs do not say": (
        args(),
        {},
        FakeCuda(count=2),
        {"accelerators_per_node": "2", "accelerator_model_name": "NVIDIA H100 80GB HBM3"},
        "all CUDA devices of this host",
    ),
    "--field wins": (
        args(field=["accelerators_per_node=1", "cooling=air"]),
        LOGGED,
        None,
        {"accelerators_per_node": "1", "cooling": "air"},
        "set by --field or --system-json",
    ),
    "identity from the logs and flags": (
        args(submitter="me", division="open"),
        {},
        None,
        {
            "submitter": "me",
            "division": "open",
            "status": "Available on-premise",
            "system_name": "sys1",
        },
        "host ",
    ),
}


@pytest.mark.parametrize("case", DESCRIBE)
def test_describe(tmp_path, case):
    arguments, logged, cuda, expected, source = DESCRIBE[case]
    desc, where = sd.describe(arguments, runs(logged), cuda)
    assert {k: desc[k] for k in expected} == expected
    assert source in where, where
    assert all(isinstance(v, str) for v in desc.values())
    assert list(desc)[: len(sd.FIELDS)] == list(sd.FIELDS)
    path = tmp_path / "systems" / "sys1.json"
    path.parent.mkdir()
    path.write_text(json.dumps(desc))
    from mlperf_logging.system_desc_checker.system_desc_checker import check_system_desc

    assert check_system_desc(str(path), "training", "5.0.0")[0]


def test_system_json_wins(tmp_path):
    extra = tmp_path / "extra.json"
    extra.write_text(
        json.dumps({"host_memory_configuration": "16x 64GB DDR5-4800", "number_of_nodes": 4})
    )
    desc, _ = sd.describe(
        args(field=["host_memory_configuration=x"], system_json=str(extra)), runs(), None
    )
    assert desc["host_memory_configuration"] == "16x 64GB DDR5-4800"
    assert desc["number_of_nodes"] == "4"  # a string, as the checker needs


@pytest.mark.parametrize(
    "arguments,topologies,fragment",
    [
        (
            args(),
            [{"accelerators_per_node": "8"}, {"accelerators_per_node": "4"}],
            "accelerators_per_node=4, but an earlier run logged 8",
        ),
        (args(), [{"number_of_nodes": "two"}], "MLLOG number_of_nodes='two': expected an integer"),
        (args(field=["cooling"]), [{}], "--field 'cooling': expected key=value"),
    ],
)
def test_describe_refuses(arguments, topologies, fragment):
    logs = [
        run_logs.Run(Path(f"r{i}"), i, True, "success", 1.0, None, None, None, 448, None, t)
        for i, t in enumerate(topologies)
    ]
    with pytest.raises(sd.DescriptionError, match=fragment.replace("(", r"\(")):
        sd.describe(arguments, logs, None)


def test_describe_refuses_a_bad_system_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(sd.DescriptionError, match="bad.json'.*expected a JSON object"):
        sd.describe(args(system_json=str(bad)), runs(), None)
