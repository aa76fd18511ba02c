"""Packaging glue pyproject.toml cannot express: the target profiles in targets/ (data at the
repository root) ship inside a wheel as the package ``edgekit._targets``, mapped from targets/.
``packages.find`` cannot discover a package mapped from another folder.

An editable install maps nothing: edgekit reads targets/ from the checkout (``edgekit.core.targets``),
and a mapped folder would make setuptools install through a meta path finder and warn about it.

Data folders (the calibration sets, the runner's C++ source, the licence texts) are listed as
namespace packages so setuptools knows them; otherwise every build warns that they are importable
but "absent from the packages configuration"."""

import sys

from setuptools import find_namespace_packages, setup

packages = find_namespace_packages(include=["edgekit", "edgekit.*"], exclude=["*.__pycache__"])
if "editable_wheel" in sys.argv:
    setup(packages=packages, package_dir={"": "."})
else:
    setup(packages=[*packages, "edgekit._targets"], package_dir={"": ".", "edgekit._targets": "targets"})
