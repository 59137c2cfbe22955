"""The parts of the build pyproject.toml cannot state.

configs/ (kept at the top of the checkout, where users and docs find it) ships inside the wheel
as the data folder bert/configs/, where bert.config.shipped_configs() finds it in an installed
copy. And the commit the wheel is built from is stamped into it as bert/_build_info.py (written
into the build only, git-ignored in the tree), so that an installed copy, which has no git,
still records its commit in run.json (bert/build_info.py reads it). Everything else is in
pyproject.toml.
"""

import os
import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

# namespace discovery, as pyproject's packages.find does: kernels/csrc/*/ (the CUDA sources,
# package data of kernels) have no __init__.py. bert/tools/ (the GPU window harness, benchmarks,
# experiments) works on a checkout (git, benchmarks/results/, scripts/) and is not shipped.
PACKAGES = find_namespace_packages(
    include=["bert", "bert.*", "data", "data.*", "kernels", "kernels.*"],
    exclude=["*.__pycache__", "bert.tools", "bert.tools.*"],
)
HERE = Path(__file__).resolve().parent


def source_commit() -> str | None:
    """$BERT_COMMIT, else the checkout's HEAD (-dirty with uncommitted changes), else None (a
    build from an sdist or an exported tree)."""
    if os.environ.get("BERT_COMMIT"):
        return os.environ["BERT_COMMIT"]
    try:
        git = dict(cwd=HERE, capture_output=True, text=True, check=True, timeout=10)
        sha = subprocess.run(["git", "rev-parse", "HEAD"], **git).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], **git).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("-dirty" if dirty else "")


class StampedBuild(build_py):
    """build_py, then bert/_build_info.py in the build holding the source commit."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "bert" / "_build_info.py"
        target.write_text(
            f'"""Written by setup.py when this copy was built."""\n\nCOMMIT = {source_commit()!r}\n'
        )


setup(
    packages=[*PACKAGES, "bert.configs"],
    package_dir={"bert.configs": "configs"},
    # the planner's published results and their networks: its default calibration reads them
    package_data={
        "bert.configs": ["*.yaml"],
        "bert.plan": ["*.json"],
        "kernels": ["csrc/**/*", "*.md"],
    },
    cmdclass={"build_py": StampedBuild},
)
