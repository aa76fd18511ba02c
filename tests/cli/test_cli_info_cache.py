"""`edgekit info`, `edgekit cache`, `--json` results and shell completion, through the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()


def test_info_summarises_a_manifest(digits_static):
    manifest = json.loads((digits_static / "manifest.json").read_text())
    result = runner.invoke(app, ["info", str(digits_static), "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    info = json.loads(result.stdout)
    assert (info["kind"], info["model"], info["target"]) == ("quantized", "digits-cnn", "rpi4")
    assert info["recipe"]["method"] == "static"
    assert info["recipe"]["recipe_sha256"] == manifest["quantization"]["recipe_sha256"]
    by_path = {f["path"]: f for f in info["files"]}
    assert set(by_path) == {f["path"] for f in manifest["files"]}
    for entry in manifest["files"]:
        got = by_path[entry["path"]]
        assert got["bytes"] == (digits_static / entry["path"]).stat().st_size  # the size on disk
        assert got["sha256"] == entry["sha256"] and got["accuracy"] == entry["metrics"]["accuracy"]
    assert info["total_bytes"] == sum(f["bytes"] for f in info["files"])
    assert info["provenance"]["versions"]["edgekit"] == manifest["versions"]["edgekit"]
    assert info["provenance"]["parent"]["kind"] == "checkpoint"

    text = runner.invoke(app, ["info", str(digits_static), "--verify"])
    assert text.exit_code == 0, text.stderr
    assert "quantized artifact of digits-cnn for rpi4" in text.stdout and "recipe: static" in text.stdout
    assert "checksums: every model file matches" in text.stdout
    for entry in manifest["files"]:
        assert entry["path"] in text.stdout


def test_info_refuses_what_is_not_an_artifact(tmp_path):
    missing = runner.invoke(app, ["info", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and missing.stderr.startswith("Error: artifact not found")
    (tmp_path / "manifest.json").write_text("[1, 2]")
    bad = runner.invoke(app, ["info", str(tmp_path)])
    assert bad.exit_code == 2 and "must hold a JSON object" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_info_verify_catches_a_changed_file(digits_fp32_export, tmp_path):
    import shutil

    copy = tmp_path / "e"
    shutil.copytree(digits_fp32_export, copy)
    (copy / "model.onnx").write_bytes((copy / "model.onnx").read_bytes() + b"x")
    assert runner.invoke(app, ["info", str(copy)]).exit_code == 0  # the summary alone reads the manifest
    result = runner.invoke(app, ["info", str(copy), "--verify"])
    assert result.exit_code == 2 and "does not match its manifest checksum" in result.stderr


def test_export_and_models_and_targets_print_json(digits_checkpoint, tmp_path):
    result = runner.invoke(app, ["export", str(digits_checkpoint), "--format", "onnx", "-o", str(tmp_path / "e"),
                                 "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    doc = json.loads(result.stdout)  # nothing but JSON on stdout
    assert doc["kind"] == "export" and [f["format"] for f in doc["files"]] == ["onnx"]
    assert doc["files"][0]["sha256"] == json.loads((tmp_path / "e" / "manifest.json").read_text())["files"][0]["sha256"]
    models = json.loads(runner.invoke(app, ["models", "--json"]).stdout)
    assert models["digits-cnn"]["task"]["dataset"] == "digits" and models["digits-cnn"]["outputs"] == ["logits"]
    targets = json.loads(runner.invoke(app, ["targets", "--json"]).stdout)
    assert targets["rpi4"]["cores"] == 4 and "budgets" in targets["rpi4"]


def _fill(folder, files: dict[str, int | str]) -> int:
    for rel, content in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * content if isinstance(content, int) else content.encode())
    return sum(len(p.read_bytes()) for p in (folder / rel for rel in files))


def _tagged(name: str) -> int:
    """Make cache part ``name`` the way edgekit's writers do; the bytes of its tag."""
    from edgekit.core.cache import TAG_NAME, part_dir

    return (part_dir(name) / TAG_NAME).stat().st_size


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(root))
    return root


def test_cache_shows_sizes_and_clears_only_edgekit_parts(cache_dir, tmp_path):
    keys = ["a" * 64, "b" * 64]
    calib = _tagged("calibration") + _fill(cache_dir, {
        f"calibration/{key}.json": json.dumps({"schema": "edgekit.calibration-cache", "key": key}) for key in keys})
    text = _tagged("text") + _fill(cache_dir, {"text/" + "c" * 32 + "/meta.json": json.dumps({"key": "c" * 32}),
                                               "text/" + "c" * 32 + "/train.tokens.npy": 5000})
    rootfs = _tagged("rootfs") + _fill(cache_dir, {
        "rootfs/bookworm-arm64-py3.11/usr/bin/python3": 7000,
        "rootfs/bookworm-arm64-py3.11/etc/edgekit-rootfs.json": json.dumps({"schema": "edgekit.rootfs"})})
    _fill(cache_dir, {"someone-else/keep.txt": 10})
    outside = tmp_path / "outside"
    _fill(outside, {"precious.txt": 3})
    os.symlink(outside, cache_dir / "rootfs" / "link-out")  # never followed, never emptied

    shown = runner.invoke(app, ["cache", "--json"])
    assert shown.exit_code == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["root"] == str(cache_dir)
    parts = {p["name"]: p for p in doc["parts"]}
    assert (parts["calibration"]["bytes"], parts["calibration"]["files"]) == (calib, 3)  # two entries and the tag
    assert parts["text"]["bytes"] == text
    assert parts["rootfs"]["bytes"] == rootfs + os.lstat(cache_dir / "rootfs" / "link-out").st_size
    assert parts["someone-else"]["ours"] is False
    assert doc["total_bytes"] == sum(p["bytes"] for p in doc["parts"] if p["ours"])
    table = runner.invoke(app, ["cache"])
    assert table.exit_code == 0 and "calibration" in table.stdout and "someone-else" in table.stdout

    only = runner.invoke(app, ["cache", "rootfs", "--clear"])
    assert only.exit_code == 0, only.stderr
    assert not (cache_dir / "rootfs").exists() and (cache_dir / "calibration").is_dir()
    assert (outside / "precious.txt").read_bytes() == b"xxx"

    everything = runner.invoke(app, ["cache", "--clear", "--json"])
    assert everything.exit_code == 0
    cleared = json.loads(everything.stdout)
    assert {p["name"] for p in cleared["removed"]} == {"calibration", "text"}
    assert cleared["freed_bytes"] == calib + text
    assert sorted(p.name for p in cache_dir.iterdir()) == ["someone-else"]  # not ours: left alone

    bad = runner.invoke(app, ["cache", "someone-else", "--clear"])
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: unknown cache part 'someone-else'")
    assert (cache_dir / "someone-else" / "keep.txt").exists()


def test_cache_root_is_used_by_every_cache(cache_dir):
    from edgekit.data.text import cache_root
    from edgekit.emulate import rootfs
    from edgekit.quantize.calibration import cache as calib_cache

    assert cache_root() == cache_dir
    assert rootfs.default_cache_dir() == cache_dir / "rootfs"
    assert calib_cache.default_cache_dir() == cache_dir / "calibration"


def test_shell_completion_is_enabled():
    import subprocess
    import sys

    env = {**os.environ, "_EDGEKIT_COMPLETE": "complete_bash", "COMP_WORDS": "edgekit quantize --calibr",
           "COMP_CWORD": "2"}
    script = Path(sys.executable).parent / "edgekit"  # the console script: completion keys on its name
    if not script.exists():
        pytest.skip("the edgekit console script is not installed beside this python")
    done = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "--calibrate-method" in done.stdout.split()
    shown = runner.invoke(app, ["--help"])
    assert "--install-completion" in shown.stdout
