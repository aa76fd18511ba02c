"""Packaging glue pyproject.toml cannot express: the target profiles in targets/ (data at the
repository root) ship inside the wheel as the package ``edgekit._targets`` (see package-dir in
pyproject.toml). ``packages.find`` cannot discover a package mapped from another folder.

Data folders (the calibration sets, the runner's C++ source, the licence texts) are listed as
namespace packages so setuptools knows them; otherwise every build warns that they are importable
but "absent from the packages configuration"."""

from setuptools import find_namespace_packages, setup

packages = find_namespace_packages(include=["edgekit", "edgekit.*"], exclude=["*.__pycache__"])
setup(packages=[*packages, "edgekit._targets"])
