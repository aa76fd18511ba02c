"""Packaging glue pyproject.toml cannot express: the target profiles in targets/ (data at the
repository root) ship inside the wheel as the package ``edgekit._targets`` (see package-dir in
pyproject.toml). ``packages.find`` cannot discover a package mapped from another folder."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["edgekit", "edgekit.*"]), "edgekit._targets"])
