"""The MLPerf system description (systems/<system>.json) read from the machine and the logs.

Where each field comes from, first source that knows it:

- what the runs used (number_of_nodes, accelerators_per_node, accelerator_model_name): the
  logs' MLLOG keys of the same names (constants.py TOPOLOGY_KEYS), else this host: no
  CUDA device means a CPU run (0 accelerators, accelerator fields "N/A"), else all of its
  CUDA devices; one node unless told;
- the host: /proc/cpuinfo (model through `cpu_model`, sockets, cores and logical
  CPUs of the whole node), /sys/devices/system/cpu (caches, maximum clock), /proc/meminfo
  (memory), /sys/block (disks), /etc/os-release and the kernel release;
- the GPU (when the runs used one and this host has the same model): torch.cuda's device
  properties (memory, clock, L2 cache);
- software: the versions of this Python environment (torch with its CUDA and cuDNN, Python,
  mlperf-logging): package from the environment that ran the runs.

Fields that no file here can tell (memory DIMM layout, cooling, interconnects between nodes and
devices) say "unknown"; on a single node the inter-node network fields say "N/A". The caller's
flags, --field and --system-json override any of them.
"""

from __future__ import annotations

import platform
import re
from importlib import metadata
from pathlib import Path

from bert.core.errors import BadInputError
from bert.core.readers import read_json
from bert.mlperf.constants import ACCELERATOR_MODEL_NAME, ACCELERATORS_PER_NODE, NUMBER_OF_NODES

UNKNOWN = "unknown"
AVAILABILITY = {
    "onprem": "Available on-premise",
    "cloud": "Available cloud",
    "research": "Research, Development, or Internal (RDI)",
    "preview": "Preview",
}
# system_desc_checker's required fields (training 5.0.0), in its order: the json's order.
FIELDS = (
    "submitter",
    "division",
    "status",
    "system_name",
    "number_of_nodes",
    "host_processors_per_node",
    "host_processor_model_name",
    "host_processor_core_count",
    "host_processor_vcpu_count",
    "host_processor_frequency",
    "host_processor_caches",
    "host_processor_interconnect",
    "host_memory_capacity",
    "host_storage_type",
    "host_storage_capacity",
    "host_networking",
    "host_networking_topology",
    "host_memory_configuration",
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_host_interconnect",
    "accelerator_frequency",
    "accelerator_on-chip_memories",
    "accelerator_memory_configuration",
    "accelerator_memory_capacity",
    "accelerator_interconnect",
    "accelerator_interconnect_topology",
    "cooling",
    "hw_notes",
    "framework",
    "other_software_stack",
    "operating_system",
    "sw_notes",
)
NA = "N/A"
# what only a system with accelerators can state (accelerators_per_node is 0 without them)
ACCELERATOR_FIELDS = tuple(f for f in FIELDS if f.startswith("accelerator_"))


class DescriptionError(BadInputError):
    """Arguments or logs that give no consistent description (bad input)."""


# -- host --------------------------------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _cpuinfo_records(text: str) -> list[dict[str, str]]:
    records, current = [], {}
    for line in text.splitlines() + [""]:
        if not line.strip():
            if current:
                records.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    return [r for r in records if "processor" in r]


def _size(kib: float) -> str:
    for unit, scale in (("TiB", 1 << 30), ("GiB", 1 << 20), ("MiB", 1 << 10)):
        if kib >= scale:
            return f"{kib / scale:.1f} {unit}".replace(".0 ", " ")
    return f"{kib:.0f} KiB"


def _cache_sizes(sysfs: Path) -> str:
    """cpu0's caches from sysfs, e.g. "L1d 32 KiB, L1i 32 KiB, L2 512 KiB, L3 32 MiB"."""
    parts = []
    for index in sorted((sysfs / "devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind = _read(index / "level").strip(), _read(index / "type").strip()
        size = _read(index / "size").strip()
        match = re.fullmatch(r"(\d+)([KMG]?)", size)
        if not (level and match):
            continue
        kib = int(match.group(1)) * {"": 1 / 1024, "K": 1, "M": 1024, "G": 1 << 20}[match.group(2)]
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        parts.append(f"L{level}{suffix} {_size(kib)}")
    return ", ".join(parts)


def _frequency(sysfs: Path, records: list[dict[str, str]], model: str) -> str:
    max_khz = _read(sysfs / "devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    if max_khz.isdigit():
        return f"{int(max_khz) / 1e6:.2f} GHz (max)"
    named = re.search(r"@\s*([\d.]+\s*GHz)", model)
    if named:
        return named.group(1)
    mhz = records[0].get("cpu MHz", "") if records else ""
    try:
        return f"{float(mhz) / 1000:.2f} GHz"
    except ValueError:
        return UNKNOWN


def _sockets_and_cores(sysfs: Path, records: list[dict[str, str]]) -> tuple[int, int]:
    """(processors per node, physical cores per node); 0 where the files do not say."""
    packages = {r["physical id"] for r in records if "physical id" in r}
    cores = {
        (r["physical id"], r["core id"]) for r in records if "physical id" in r and "core id" in r
    }
    if not packages:  # e.g. arm64, whose cpuinfo has no topology: ask sysfs
        for cpu in (sysfs / "devices/system/cpu").glob("cpu[0-9]*"):
            package = _read(cpu / "topology/physical_package_id").strip()
            core = _read(cpu / "topology/core_id").strip()
            if package:
                packages.add(package)
                if core:
                    cores.add((package, core))
    return len(packages), len(cores)


def _disks(sysfs: Path) -> tuple[str, str]:
    """(storage type, capacity) of the physical block devices in /sys/block."""
    kinds, total = [], 0
    for dev in sorted((sysfs / "block").glob("*")):
        if dev.name.startswith(("loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd")):
            continue
        sectors = _read(dev / "size").strip()
        if not sectors.isdigit() or int(sectors) == 0:
            continue
        total += int(sectors) * 512
        if dev.name.startswith("nvme"):
            kinds.append("NVMe SSD")
        elif dev.name.startswith(("vd", "xvd")):
            kinds.append("virtual disk")
        else:
            kinds.append("HDD" if _read(dev / "queue/rotational").strip() == "1" else "SSD")
    if not kinds:
        return UNKNOWN, UNKNOWN
    counted = ", ".join(f"{kinds.count(k)}x {k}" for k in dict.fromkeys(kinds))
    return counted, f"{total / 1e9:.0f} GB"


def _operating_system(etc: Path) -> str:
    release = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', _read(etc / "os-release"), re.M))
    name = release.get("PRETTY_NAME") or release.get("NAME")
    kernel = f"{platform.system()} {platform.release()}".strip()
    return f"{name}, {kernel}" if name else kernel or UNKNOWN


def host_fields(
    proc: Path = Path("/proc"), sysfs: Path = Path("/sys"), etc: Path = Path("/etc")
) -> dict[str, str]:
    records = _cpuinfo_records(_read(proc / "cpuinfo"))
    model = cpu_model(proc / "cpuinfo") or UNKNOWN
    sockets, cores = _sockets_and_cores(sysfs, records)
    mem = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read(proc / "meminfo"), re.M)
    storage_type, storage_capacity = _disks(sysfs)
    return {
        "host_processors_per_node": str(sockets) if sockets else UNKNOWN,
        "host_processor_model_name": model,
        "host_processor_core_count": str(cores) if cores else UNKNOWN,
        "host_processor_vcpu_count": str(len(records)) if records else UNKNOWN,
        "host_processor_frequency": _frequency(sysfs, records, model),
        "host_processor_caches": _cache_sizes(sysfs)
        or (
            f"{records[0]['cache size']} (per core)"
            if records and "cache size" in records[0]
            else UNKNOWN
        ),
        "host_processor_interconnect": UNKNOWN,
        "host_memory_capacity": _size(int(mem.group(1))) if mem else UNKNOWN,
        "host_memory_configuration": UNKNOWN,
        "host_storage_type": storage_type,
        "host_storage_capacity": storage_capacity,
        "operating_system": _operating_system(etc),
        "cooling": UNKNOWN,
    }


# -- accelerators ------------------------------------------------------------------------------


def local_cuda():
    """torch.cuda when this host has a CUDA device, else None (also when torch is missing)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda if torch.cuda.is_available() and torch.cuda.device_count() > 0 else None


def accelerator_fields(per_node: int, model: str | None, cuda) -> dict[str, str]:
    """Fields for `per_node` accelerators of `model` (0: a CPU run); device properties from
    `cuda` (torch.cuda or None) only when its device 0 is that model."""
    if per_node == 0:
        return {"accelerators_per_node": "0", **{name: NA for name in ACCELERATOR_FIELDS}}
    fields = {
        "accelerators_per_node": str(per_node),
        **{name: UNKNOWN for name in ACCELERATOR_FIELDS},
    }
    fields["accelerator_model_name"] = model or UNKNOWN
    if cuda is not None and model and cuda.get_device_name(0) == model:
        props = cuda.get_device_properties(0)
        fields["accelerator_memory_capacity"] = _size(props.total_memory / 1024)
        clock = getattr(props, "clock_rate", 0)  # kHz
        if clock:
            fields["accelerator_frequency"] = f"{clock / 1000:.0f} MHz"
        l2 = getattr(props, "L2_cache_size", 0)
        if l2:
            fields["accelerator_on-chip_memories"] = f"L2 {_size(l2 / 1024)}"
    return fields


# -- software ----------------------------------------------------------------------------------


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def software_fields() -> dict[str, str]:
    stack = [f"Python {platform.python_version()}"]
    try:
        import torch

        framework = f"PyTorch {torch.__version__}"
        if torch.version.cuda:
            stack.append(f"CUDA {torch.version.cuda}")
            if torch.backends.cudnn.is_available():
                stack.append(f"cuDNN {cudnn_version(torch.backends.cudnn.version())}")
        else:
            stack.append("CPU-only PyTorch build")
    except ImportError:
        framework = f"PyTorch {_version('torch') or UNKNOWN}"
    for package in ("mlperf-logging", "triton"):
        version = _version(package)
        if version:
            stack.append(f"{package} {version}")
    return {"framework": framework, "other_software_stack": ", ".join(stack)}


def cudnn_version(number: int) -> str:
    """torch.backends.cudnn.version()'s integer as major.minor.patch: 90100 -> 9.1.0 (cuDNN 9
    counts major * 10000), 8907 -> 8.9.7 (cuDNN 8 and older: major * 1000)."""
    if number >= 10000:
        return f"{number // 10000}.{number // 100 % 100}.{number % 100}"
    return f"{number // 1000}.{number // 100 % 10}.{number % 100}"


# -- the whole description -----------------------------------------------------------------


def run_topology(runs: list) -> dict[str, str]:
    """The TOPOLOGY_KEYS the logs carry; runs of one package must agree."""
    found: dict[str, str] = {}
    for run in runs:
        for key, value in run.topology.items():
            if found.setdefault(key, value) != value:
                raise DescriptionError(
                    f"{run.path}: {key}={value}, but an earlier run logged "
                    f"{found[key]}; one system description cannot cover "
                    f"both"
                )
    return found


def describe(args, runs: list, cuda) -> tuple[dict, str]:
    """The description of the system that ran `runs` (reader.Run), with the
    overrides of package_results' `args`, and a line saying where its topology came from.
    `cuda`: local_cuda()."""
    logged = run_topology(runs)
    nodes = args.nodes or _logged_int(logged, NUMBER_OF_NODES, runs) or 1
    if args.accelerators_per_node is not None:
        per_node, source = args.accelerators_per_node, "from --accelerators-per-node"
    elif ACCELERATORS_PER_NODE in logged:
        per_node, source = _logged_int(logged, ACCELERATORS_PER_NODE, runs), "from the logs"
    elif cuda is None:
        per_node, source = 0, "a CPU run: the logs do not say, and this host has no CUDA device"
    else:
        per_node = cuda.device_count()
        source = (
            "the logs do not say: all CUDA devices of this host; pass "
            "--accelerators-per-node if the runs used fewer"
        )
    model = args.accelerator or logged.get(ACCELERATOR_MODEL_NAME)
    if per_node and not model and cuda is not None:
        model = cuda.get_device_name(0)
    status = runs[0].submission_status or "onprem"
    desc = {
        "submitter": args.submitter or runs[0].org or UNKNOWN,
        "division": args.division or runs[0].division or "closed",
        "status": AVAILABILITY.get(status, status),
        "system_name": args.system,
        "number_of_nodes": str(nodes),
    }
    desc.update(host_fields())
    desc.update(accelerator_fields(per_node, model, cuda))
    desc.update(software_fields())
    single = nodes == 1
    desc.update(
        {
            "host_networking": NA if single else UNKNOWN,
            "host_networking_topology": NA if single else UNKNOWN,
            "hw_notes": "host fields read from the packaging machine by scripts/package_results.py",
            "sw_notes": "software versions of the packaging environment",
        }
    )
    for item in args.field:
        key, sep, value = item.partition("=")
        if not sep:
            raise DescriptionError(f"--field {item!r}: expected key=value")
        desc[key] = value
    if args.system_json:
        desc.update(read_json(args.system_json, "--system-json", DescriptionError))
    desc = {**{k: desc[k] for k in FIELDS if k in desc}, **desc}  # the checker's order
    # the checker joins fields as strings
    desc = {k: str(v) if isinstance(v, (int, float)) else v for k, v in desc.items()}
    if desc["accelerators_per_node"] != str(per_node):
        source = "set by --field or --system-json"
    where = (
        f"system: {desc['number_of_nodes']} node(s) x {desc['accelerators_per_node']} "
        f"accelerator(s) [{desc['accelerator_model_name']}] ({source}), host "
        f"{desc['host_processor_model_name']}"
    )
    return desc, where


def _logged_int(logged: dict[str, str], key: str, runs: list) -> int | None:
    if key not in logged:
        return None
    try:
        return int(logged[key])
    except ValueError:
        raise DescriptionError(
            f"{runs[0].path}: MLLOG {key}={logged[key]!r}: expected an integer"
        ) from None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name from /proc/cpuinfo (or another copy of it), or "" where that file
    does not say."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
