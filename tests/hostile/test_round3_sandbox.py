"""A native bundle's own programs run only in a sandbox (edgekit.emulate.sandbox): a bundle whose
``edgekit-run`` was replaced (SHA256SUMS recomputed, as anyone can) cannot write or read host files,
reach a listener on 127.0.0.1, or outlive the deadline, under ``verify --emulate`` (aarch64, QEMU) or a
local ``bench`` (a host-built bundle). Real bundles, real compilers, real processes."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from corpus.hostile import assert_one_line_error
from typer.testing import CliRunner

from edgekit.cli.app import app

pytestmark = pytest.mark.slow
pytest.importorskip("executorch")
runner = CliRunner()
HOST_TARGET = {"x86_64": "x86-64"}.get(platform.machine())
SECRET = "edgekit-sandbox-secret-7f3a"
COMM = "ekhostile"

HOSTILE_C = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

static void copy(const char *from, const char *to) {
  FILE *in = fopen(from, "r"), *out;
  char buf[4096];
  size_t n;
  if (!in) return;
  out = fopen(to, "a");
  while (out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out), fwrite(buf, 1, n, stdout);
  if (out) fclose(out);
  fclose(in);
}

int main(int argc, char **argv) {
  const char *markers[] = {MARKER, TMP_MARKER};
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(markers[i], "w");
    if (f) fputs("written from the bundle\n", f), fclose(f);
  }
  const char *out = argc > 4 ? argv[4] : "/work/stolen";
  copy(SECRET_FILE, out);
  copy("/etc/shadow", out);
  copy(SECRET_FILE, MARKER);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(PORT);
  addr.sin_addr.s_addr = htonl(0x7f000001);
  if (s >= 0 && connect(s, (struct sockaddr *)&addr, sizeof addr) == 0) write(s, "connected\n", 10);
#ifdef HANG
  prctl(PR_SET_NAME, "ekhostile", 0, 0, 0);
  setsid();
  if (fork() == 0) { setsid(); for (;;) pause(); }
  for (;;) pause();
#endif
  fprintf(stderr, "Error: the hostile runner did its worst\n");
  return 1;
}
"""


@pytest.fixture(scope="module")
def export_dir(digits_checkpoint, tmp_path_factory) -> Path:
    from conftest import CALIB_DIGITS

    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    if shutil.which("qemu-aarch64-static") is None or shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs qemu-user-static and crossbuild-essential-arm64 (.ci/setup installs both)")
    base = tmp_path_factory.mktemp("sandbox-export")
    quantize(digits_checkpoint, "static", base / "q", "rpi4", calib=CALIB_DIGITS, formats=("executorch",))
    export(base / "q", base / "export", formats=("executorch",), target="rpi4")
    return base / "export"


def _bundle(export_dir: Path, target: str, out: Path) -> Path:
    made = runner.invoke(app, ["bundle", str(export_dir), "--target", target, "--runtime", "native", "--out", str(out),
                               "--force"])
    assert made.exit_code == 0, made.output
    return out


@pytest.fixture(scope="module")
def rpi4_bundle(export_dir, tmp_path_factory) -> Path:
    return _bundle(export_dir, "rpi4", tmp_path_factory.mktemp("sandbox-rpi4") / "rpi4")


@pytest.fixture(scope="module")
def host_bundle(export_dir, tmp_path_factory) -> Path:
    if HOST_TARGET is None or shutil.which("gcc") is None:
        pytest.skip(f"no edgekit target or no gcc for this host ({platform.machine()})")
    return _bundle(export_dir, HOST_TARGET, tmp_path_factory.mktemp("sandbox-host") / "host")


class Trap:
    """The host side of the attack: a secret file, marker paths, a listener on 127.0.0.1."""

    def __init__(self, tmp_path: Path):
        self.secret = tmp_path / "secret.txt"
        self.secret.write_text(SECRET + "\n")
        self.marker = tmp_path / "written-by-bundle"
        self.tmp_marker = Path(f"/tmp/edgekit-sandbox-marker-{os.getpid()}-{tmp_path.name}")
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.listener.settimeout(0.5)
        self.port = self.listener.getsockname()[1]

    def defines(self) -> list[str]:
        return [f'-DMARKER="{self.marker}"', f'-DTMP_MARKER="{self.tmp_marker}"', f'-DSECRET_FILE="{self.secret}"',
                f"-DPORT={self.port}"]

    def assert_untouched(self, *outputs: str) -> None:
        assert not self.marker.exists() and not self.tmp_marker.exists()
        try:
            conn, _ = self.listener.accept()
            conn.close()
            raise AssertionError("the bundle's program reached a listener on 127.0.0.1")
        except socket.timeout:
            pass
        finally:
            self.listener.close()
        for text in outputs:
            assert SECRET not in text and "root:" not in text


def _plant(bundle: Path, dest: Path, compiler: str, trap: Trap, *flags: str) -> Path:
    """A copy of ``bundle`` whose edgekit-run is the hostile program, SHA256SUMS recomputed."""
    shutil.copytree(bundle, dest)
    source = dest.parent / "hostile.c"
    source.write_text(HOSTILE_C)
    subprocess.run([compiler, "-O1", "-o", str(dest / "edgekit-run"), str(source), *trap.defines(), *flags],
                   check=True, capture_output=True)
    sums = dest / "SHA256SUMS"
    lines = []
    for line in sums.read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name == "edgekit-run":
            digest = hashlib.sha256((dest / name).read_bytes()).hexdigest()
        lines.append(f"{digest}  {name}")
    sums.write_text("\n".join(lines) + "\n")
    return dest


def _no_process_named(name: str, within_s: float = 20.0) -> bool:
    """No live process (zombies aside: already dead, awaiting their reaper) named ``name``, polled
    for a generous while: the kernel tears a PID namespace down asynchronously."""
    deadline = time.monotonic() + within_s
    while True:
        alive = False
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and (entry / "comm").read_text().strip() == name:
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    alive = alive or state not in ("Z", "X")
            except (OSError, IndexError):
                continue
        if not alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def test_verify_emulate_keeps_a_hostile_runner_off_the_host(rpi4_bundle, tmp_path):
    trap = Trap(tmp_path)
    bundle = _plant(rpi4_bundle, tmp_path / "bundle", "aarch64-linux-gnu-gcc", trap)
    result = runner.invoke(app, ["verify", str(bundle), "--emulate", "--timeout", "120"])
    assert_one_line_error(result, result.exit_code)
    assert result.exit_code != 0
    trap.assert_untouched(result.output)


def test_verify_emulate_stops_a_hostile_runner_that_never_ends(rpi4_bundle, tmp_path):
    trap = Trap(tmp_path)
    bundle = _plant(rpi4_bundle, tmp_path / "bundle", "aarch64-linux-gnu-gcc", trap, "-DHANG")
    started = time.monotonic()
    result = runner.invoke(app, ["verify", str(bundle), "--emulate", "--timeout", "5"])
    assert time.monotonic() - started < 120  # generous: "does not hang", not a speed bound
    assert result.exit_code != 0 and "timed out" in result.output
    assert_one_line_error(result, result.exit_code)
    assert _no_process_named(COMM)
    trap.assert_untouched(result.output)


def test_a_local_bench_keeps_a_hostile_host_runner_off_the_host(host_bundle, tmp_path):
    trap = Trap(tmp_path)
    bundle = _plant(host_bundle, tmp_path / "bundle", "gcc", trap)
    result = runner.invoke(app, ["bench", str(bundle), "--threads", "1", "--min-runs", "1", "--min-time", "0"])
    assert result.exit_code != 0
    assert_one_line_error(result, result.exit_code)
    trap.assert_untouched(result.output)


def test_a_local_bench_stops_a_hostile_host_runner_that_never_ends(host_bundle, tmp_path):
    from edgekit.bench.api import bench
    from edgekit.core.errors import EdgekitError

    trap = Trap(tmp_path)
    bundle = _plant(host_bundle, tmp_path / "bundle", "gcc", trap, "-DHANG")
    started = time.monotonic()
    with pytest.raises(EdgekitError, match="timed out"):
        bench(bundle, threads=1, min_runs=1, min_time_s=0, timeout_s=5, lm_tokens=0)
    assert time.monotonic() - started < 120
    assert _no_process_named(COMM)
    trap.assert_untouched()


def test_the_sandbox_root_holds_the_bundle_and_its_libraries_only(rpi4_bundle):
    from edgekit.emulate.sandbox import bundle_sandbox
    from edgekit.native.toolchain import CROSS

    with bundle_sandbox(rpi4_bundle, ["edgekit-run"], arch="aarch64", libraries_from=Path(CROSS["aarch64"][2]),
                        qemu=Path(shutil.which("qemu-aarch64-static"))) as box:
        root = box.root
        top = sorted(p.name for p in root.iterdir())
        assert "bundle" in top and "work" in top and "etc" not in top and "home" not in top
        assert (root / "work").stat().st_uid == (65534 if os.geteuid() == 0 else os.geteuid())
    assert not root.exists()  # thrown away
