"""What the lent GPU machines' image lacks, checked here before device time is spent.

The image ('cuda', ../.library/device/KINDS.md, package list read 2026-11-17) has its own
Python with torch and many packages, no internet, and no pip index: anything else the project
imports must travel as a wheel in .whl/ (scripts/bench/prepare_gpu_carry.sh, WHEELS). The
2026-11-26 window lost a device call to `import annotated_types`: pydantic (and what it needs)
was neither on the image nor carried. `uncovered()` walks the project's own requirements
(pyproject's [project] dependencies), and through every package carried, their requirements
too (their metadata in this environment), and names each one the image lacks and no wheel
brings.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # 3.10: the installed project's metadata says the same
    tomllib = None

from bert.tools.common import ROOT

# KINDS.md, nvidia-h100-x1 and nvidia-h200 ('cuda' image), read on a machine on 2026-11-17
IMAGE_PACKAGES = frozenset(
    """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn
einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec
gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml
markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda
numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13
nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo
pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov
pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests
rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split()
)
CARRY_SCRIPT = ROOT / "scripts" / "bench" / "prepare_gpu_carry.sh"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str | None:
    """The distribution a requirement string names; None for an extra's requirement."""
    if "extra ==" in requirement.replace('"', "'").replace("extra==", "extra =="):
        return None
    return normalize(re.match(r"[A-Za-z0-9_.\-]+", requirement.strip()).group(0))


def project_requirements(root: Path = ROOT) -> list[str]:
    if tomllib is None:
        found = importlib.metadata.requires("open-bert-mlperf") or []
    else:
        found = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    return [name for req in found if (name := requirement_name(req))]


def carried_wheels(script: Path = CARRY_SCRIPT) -> set[str]:
    """The distributions prepare_gpu_carry.sh downloads (its WHEELS=( ... ) list)."""
    found = re.search(r"WHEELS=\(([^)]*)\)", script.read_text())
    return {normalize(spec.split("==")[0]) for spec in found.group(1).split()} if found else set()


def _requires(name: str) -> list[str]:
    try:
        found = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []  # not installed here either: its own requirements cannot be read
    return [n for req in found if (n := requirement_name(req))]


def uncovered(
    root: Path = ROOT, image: frozenset[str] = IMAGE_PACKAGES, carried: set[str] | None = None
) -> list[str]:
    """Requirements the image lacks and no carried wheel brings, with the package that needs
    each ("pydantic (needed by the project)"); empty when everything is covered."""
    carried = carried_wheels() if carried is None else carried
    missing, seen = [], set()
    todo = [(name, "the project") for name in project_requirements(root)]
    while todo:
        name, needed_by = todo.pop()
        if name in seen or name in image:
            continue
        seen.add(name)
        if name not in carried:
            missing.append(f"{name} (needed by {needed_by})")
            continue
        todo += [(dep, name) for dep in _requires(name)]
    return sorted(missing)
