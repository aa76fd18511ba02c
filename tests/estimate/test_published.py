"""The published on-board figures the estimate is fitted to: each parses, names its source, and
the networks benchmarks/latency_estimate.py runs for them are the published architectures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edgekit.core.errors import InputFileError
from edgekit.estimate.figures import load_figures
from edgekit.core.targets import available_targets, load_target

ROOT = Path(__file__).resolve().parents[2]


def test_every_figure_names_its_source_and_board():
    figures = load_figures()
    assert len(figures) >= 6
    for figure in figures:
        source = figure.source
        assert source.url.startswith("https://github.com/") and len(source.commit) == 40, figure.label
        assert source.repo in source.url and source.path and source.runtime and source.statistic
        target = load_target(figure.board)  # a board edgekit has a target for, on the core the figure names
        assert target.core.lower() == figure.core, figure.label
        assert figure.mhz <= target.max_mhz


def test_figures_to_fit_and_figures_held_back_cover_two_cores():
    figures = load_figures()
    for role in ("fit", "check"):
        mine = [f for f in figures if f.role == role]
        assert len(mine) >= 6 and len({f.core for f in mine}) >= 2, role
    assert "rpi4" in available_targets() and "rpi5" in available_targets()


def test_each_figure_has_a_network_with_the_published_parameter_count():
    """Random weights, but the architecture of the paper: the parameter counts of the published
    models (torchvision's model cards, the papers' tables) to the parameter."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.published_nets import NETS

    published = {"mobilenet_v1": 4_231_976, "mobilenet_v2": 3_504_872, "mobilenet_v3_large": 5_483_032,
                 "mobilenet_v3_small": 2_542_856, "efficientnet_b0": 5_288_548, "resnet18": 11_689_512,
                 "resnet50": 25_557_032}
    assert {f.model for f in load_figures()} <= set(NETS)
    for name, factory in NETS.items():
        assert sum(p.numel() for p in factory().parameters()) == published[name], name


@pytest.mark.parametrize("text, message", [
    ('figures = [{ source = "x", board = "rpi4", core = "cortex-a72", mhz = 1800, model = "m", threads = 1, ms = 1.0, '
     'role = "fit" }]', "names source 'x'"),
    ('[sources.x]\nruntime = "r"\nrepo = "a/b"\npath = "p"\ncommit = "c"\nurl = ""\nstatistic = "s"', "source 'x' must"),
    ('figures = [{ source = "x", board = "rpi4", core = "cortex-a72", mhz = 1800, model = "m", threads = 1, ms = -1, '
     'role = "fit" }]\n[sources.x]\nruntime = "r"\nrepo = "a/b"\npath = "p"\ncommit = "c"\nurl = "u"\nstatistic = "s"',
     "ms must be a positive number"),
    ("figures = [", "cannot read published figures"),
])
def test_a_figure_without_its_source_or_with_a_bad_value_is_refused(tmp_path, text, message):
    path = tmp_path / "published.toml"
    path.write_text(text)
    with pytest.raises(InputFileError, match=message):
        load_figures(path)
