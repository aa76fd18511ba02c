"""The HTML report of bench results: self-contained, one chart per variant, seen as a person sees it
(rendered by headless Chromium, the screenshot checked pixel by pixel)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.bench.html_report import colors, render_html, variant_label, write_html
from edgekit.records.result import BenchResult, Memory, ModelInfo, Timing
from edgekit.cli.app import app

runner = CliRunner()
VARIANTS = [  # variant, format, precision, KB, accuracy, p50 ms
    ("fp32-torchscript", "torchscript", "fp32", 420, 0.985, 1.9),
    ("fp32-onnx", "onnx", "fp32", 410, 0.985, 1.2),
    ("int8-dynamic-torchscript", "torchscript", "int8", 160, 0.982, 1.6),
    ("int8-dynamic-onnx", "onnx", "int8", 115, 0.981, 0.9),
    ("int8-static-torchscript", "torchscript", "int8", 112, 0.979, 0.8),
    ("int8-static-onnx", "onnx", "int8", 110, 0.980, 0.55),
]


def make(variant, fmt, precision, kb, accuracy, p50) -> BenchResult:
    p90, p95, p99 = p50 * 1.2, p50 * 1.3, p50 * 1.6
    return BenchResult(
        ModelInfo(f"out/{variant}/model.{'onnx' if fmt == 'onnx' else 'pt'}", fmt, kb * 1024, precision=precision,
                  variant=variant, accuracy=accuracy, float_accuracy=0.985),
        {"name": "onnxruntime", "threads": 1}, {"input": [1, 1, 8, 8]}, {},
        Timing(10.0, 12.0, p50, p90, p95, p99, p50 * 1.05, p50 * 0.1, p50 * 0.85, p99 * 1.5, 500, 1.0),
        1000 / p50, Memory(120.0, 80.0, 20.0), {"machine": "x86_64", "cpu_model": "Test CPU", "logical_cores": 2},
        target="rpi4",
    )


RESULTS = [make(*v) for v in VARIANTS]


def test_page_is_self_contained_with_one_chart_per_variant():
    page = render_html(RESULTS, title="t <b>", gates={"fp32-onnx": "fail"})
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()  # readable without JavaScript
    # no external asset: nothing fetched (the SVG namespace is a name, not a download)
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:|//)', page, re.I)
    assert "@import" not in page and "url(" not in page
    assert "t &lt;b&gt;" in page  # text is escaped
    figures = re.findall(r'<figure class="variant" data-variant="([^"]+)"', page)
    assert figures == [v[0] for v in VARIANTS]
    assert len(re.findall(r'<circle class="bubble"', page)) == len(VARIANTS)
    for result in RESULTS:  # each variant's figures are printed beside its chart
        assert f"p50 {result.timing.p50:.3g}" in page.replace("0.550", "0.55")
    assert '<td class="fail">fail</td>' in page


def test_colours_are_distinct_for_many_variants():
    assert len(set(colors(30))) == 30


def test_unlabelled_results_plot_size_instead_of_accuracy():
    unlabelled = [make(v, f, p, kb, None, p50) for v, f, p, kb, _, p50 in VARIANTS[:2]]
    page = render_html(unlabelled)
    assert "size (MB)" in page and "accuracy (%)" not in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _hex_rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def _screenshot(page: Path, tmp_path: Path) -> tuple[str, "object"]:
    """(the DOM Chromium built, the screenshot as a PIL image) of ``page``."""
    from PIL import Image

    common = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--force-device-scale-factor=1", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    shot = tmp_path / f"{page.stem}.png"
    subprocess.run([*common, "--window-size=900,1800", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, text=True, timeout=120, check=True)
    return dom, Image.open(shot).convert("RGB")


def _chart_rows(image, palette: list[str]) -> list[int | None]:
    """Per colour: the top row of its distribution chart on the screenshot, None when absent.

    The chart's line (fastest run to p99) is a run of >= 20 pixels of exactly the variant's colour,
    wider than its 10-pixel swatch or table mark (bubbles are translucent, text is antialiased), with
    its p50-p90 box of the same colour around it (>= 150 pixels within 12 rows).
    """
    width, height = image.size
    pixels = image.load()

    def longest_run(y: int, rgb) -> int:
        best = run = 0
        for x in range(width):
            run = run + 1 if pixels[x, y] == rgb else 0
            best = max(best, run)
        return best

    found = []
    for color in palette:
        rgb = _hex_rgb(color)
        rows = [y for y in range(height) if longest_run(y, rgb) >= 20]
        box = 0
        if rows:
            y0 = rows[0]
            box = sum(1 for y in range(max(0, y0 - 12), min(height, y0 + 12)) for x in range(width)
                      if pixels[x, y] == rgb)
        found.append(rows[0] if rows and box >= 150 else None)
    return found


needs_browser = pytest.mark.skipif(_chromium() is None, reason="headless Chromium not installed (Debian package: chromium)")


@needs_browser
def test_chromium_screenshot_shows_every_variants_chart(tmp_path):
    """Render the page as a browser does and look at the pixels: every variant's distribution chart
    is drawn, top to bottom in the variants' order, and the page is not blank."""
    pytest.importorskip("PIL")
    page = write_html(tmp_path / "report.html", RESULTS, title="edgekit pipeline")
    dom, image = _screenshot(page, tmp_path)
    assert dom.count('class="variant"') == len(VARIANTS)  # the browser parsed every chart
    pixels = image.load()
    width, height = image.size
    assert len({pixels[x, y] for x in range(0, width, 7) for y in range(0, height, 7)}) > 20  # not blank
    rows = _chart_rows(image, colors(len(VARIANTS)))
    missing = [v[0] for v, row in zip(VARIANTS, rows) if row is None]
    assert not missing, f"charts not on the screenshot: {missing}"
    assert rows == sorted(rows), "the charts are not stacked in the variants' order"
    assert min(b - a for a, b in zip(rows, rows[1:])) >= 40  # one chart each, apart


@needs_browser
def test_the_screenshot_check_sees_a_missing_chart(tmp_path):
    """The pixel check is not fooled by the swatches, bubbles and table: drop one chart, it is missed."""
    pytest.importorskip("PIL")
    page = render_html(RESULTS)
    cut = re.sub(r'<figure class="variant" data-variant="int8-dynamic-onnx">.*?</figure>', "", page, flags=re.S)
    assert cut != page
    path = tmp_path / "cut.html"
    path.write_text(cut)
    _, image = _screenshot(path, tmp_path)
    rows = _chart_rows(image, colors(len(VARIANTS)))
    assert rows[3] is None and all(row is not None for i, row in enumerate(rows) if i != 3)


def test_bench_writes_the_html_report(digits_fp32_export, tmp_path):
    html = tmp_path / "r" / "bench.html"
    result = runner.invoke(app, ["bench", str(digits_fp32_export / "model.onnx"), str(digits_fp32_export / "model.pt"),
                                 "--min-runs", "5", "--min-time", "0", "--warmup", "1", "-t", "rpi4",
                                 "--html", str(html), "-q"])
    assert result.exit_code == 0, result.output + result.stderr
    page = html.read_text()
    assert page.count('<figure class="variant"') == 2 and "<script" not in page
    bad = runner.invoke(app, ["bench", str(digits_fp32_export / "model.onnx"), "--html", str(tmp_path)])
    assert bad.exit_code == 2 and "is a folder" in bad.stderr


def test_variant_label_falls_back_to_the_file_name():
    plain = make("", "onnx", "fp32", 10, None, 1.0)
    assert variant_label(plain) == "model.onnx"
    assert Path(plain.model.path).name == "model.onnx"
