"""The one part of the build pyproject.toml cannot state: configs/ (kept at the top of the
checkout, where users and docs find it) ships inside the wheel as the data folder bert/configs/,
where bert.config.shipped_configs() finds it in an installed copy. Everything else is in
pyproject.toml."""

from setuptools import find_namespace_packages, setup

# namespace discovery, as pyproject's packages.find does: kernels/csrc/*/ (the CUDA sources,
# package data of kernels) have no __init__.py
PACKAGES = find_namespace_packages(
    include=["bert", "bert.*", "data", "data.*", "kernels", "kernels.*"], exclude=["*.__pycache__"]
)

setup(
    packages=[*PACKAGES, "bert.configs"],
    package_dir={"bert.configs": "configs"},
    package_data={"bert.configs": ["*.yaml"], "kernels": ["csrc/**/*", "*.md"]},
)
