"""Packaging lives in setup.cfg; this file only maps the top-level ``templates/`` into the package."""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["nnlo", "nnlo.*", "nnlo_sched", "nnlo_sched.*"])
    + ["nnlo_sched.templates"],
    package_dir={"nnlo_sched.templates": "templates"},
)
