"""``edgekit verify``: check a device bundle; with ``--emulate``, run it on an emulated aarch64 board."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from edgekit.cli.common import console, handles_errors
from edgekit.core.errors import ParityError
from edgekit.core.fileio import ensure_writable_dir, write_json
from edgekit.emulate.verify import verify_emulated


@handles_errors
def verify_command(
    bundle: Path = typer.Argument(..., help="Bundle folder (from: edgekit bundle EXPORT_DIR --target rpi4 --out dist/rpi4)."),
    emulate: bool = typer.Option(
        False, "--emulate",
        help="Run the bundle on an aarch64 Debian userland under QEMU user-mode emulation and compare its outputs with this host's (needs root).",
    ),
    rootfs_cache: Path | None = typer.Option(
        None, "--rootfs-cache", help="Folder of cached rootfs builds (default: rootfs in the cache folder, see `edgekit cache`)."
    ),
    debian_release: str = typer.Option("bookworm", "--debian-release", help="Debian release of the emulated userland."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build the rootfs again even when one is cached."),
    timeout: float = typer.Option(1800.0, "--timeout", help="Limit in seconds for each long step (rootfs build, install, each emulated run)."),
    atol: float = typer.Option(1e-3, "--atol", help="Max abs difference allowed between emulated and host outputs (int8: at least 1% of the output range)."),
    no_bench: bool = typer.Option(False, "--no-bench", help="Skip the functional run of the bundle's runner.py under emulation."),
    no_serve: bool = typer.Option(False, "--no-serve", help="Skip starting the bundle's serve.py under emulation (ONNX bundles)."),
    mirror: str | None = typer.Option(None, "--mirror", help="Debian mirror for debootstrap (default: http://deb.debian.org/debian)."),
    launcher: str = typer.Option("auto", "--launcher", help="auto | binfmt | interpreter (qemu-aarch64-static named as the command; needs a cached rootfs)."),
    index_url: str | None = typer.Option(
        None, "--index-url",
        help="Install the bundle's pinned requirements from this package index instead of the one requirements.txt names "
             "(e.g. a mirror of PyTorch's CPU index where download.pytorch.org is out of reach); checked from this host "
             "first: an index out of reach, a pin it lacks, or a CUDA-only torch (PyPI's for aarch64) is refused in one line.",
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the verification report (JSON) here (an existing file only if empty or an edgekit verify report)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines and no table."),
) -> None:
    """Check a bundle (checksums, plain files only, bundle.json, requirements.txt pins only); with --emulate, prove it on an emulated aarch64 board.

    Emulated timings are a functional check only, never device latency.
    """
    if json_out is not None:
        from edgekit.core.outputs import check_report_paths

        check_report_paths({"--json": json_out}, [bundle], {"--json": "json:edgekit.verify"})
        ensure_writable_dir(json_out.parent)
    if not emulate:
        from edgekit.emulate.bundle import open_bundle

        opened = open_bundle(bundle)
        if not quiet:
            typer.echo(f"bundle OK: {opened.checked_files} files match SHA256SUMS ({opened.model.name}, {opened.precision}, "
                       f"for {opened.target}); add --emulate to run it on an emulated {opened.arch} board")
        return


    options = {"mirror": mirror} if mirror else {}
    report = verify_emulated(
        bundle, release=debian_release, cache_dir=rootfs_cache, rebuild=rebuild, timeout_s=timeout, atol=atol,
        bench=not no_bench, serve=not no_serve, launcher=launcher, index_url=index_url, progress=None if quiet else _progress(), **options,
    )
    if json_out is not None:
        from edgekit.core.outputs import check_report_paths

        check_report_paths({"--json": json_out}, [bundle], {"--json": "json:edgekit.verify"})  # still not a user's file
        write_json(json_out, report.to_dict())
    if not quiet:
        out = console()
        out.print(render_table(report))
        for line in footer(report):
            out.print(line)
    if not report.passed:
        raise ParityError(report.failure())


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_command)


def _progress():
    """Progress lines on stderr with the elapsed time: the long steps (debootstrap) take minutes."""
    started = time.monotonic()

    def report(message: str) -> None:
        typer.echo(f"[{time.monotonic() - started:7.1f}s] {message}", err=True)

    return report


def _num(value) -> str:
    if value is None:
        return "–"
    return f"{value:.3g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def render_table(report):
    from rich import box
    from rich.table import Table

    model = report.model
    if "expected_tokens" in report.emulation:  # a language model's bundle: its greedy ids
        table = Table(title=f"edgekit verify --emulate: {model['path']} ({model['precision']} language model) for "
                            f"{report.target}", box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
        for header in ("greedy ids", "emulated board", "host", "result"):
            table.add_column(header, no_wrap=False)
        check = report.batches[0]
        table.add_row(str(len(report.emulation["expected_tokens"])), ",".join(map(str, report.emulation["tokens"])),
                      ",".join(map(str, report.emulation["expected_tokens"])),
                      "ok" if check.passed else f"FAIL: {check.reason}")
        return table
    table = Table(title=f"edgekit verify --emulate: {model['path']} ({model['precision']} {model['format']}) for {report.target}",
                  box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    headers = ["batch", "max abs\nvs host", "bound", "cosine\nvs host", "top-1\nvs host",
               "max abs vs float\nemulated", "max abs vs float\nhost", "result"]
    for header in headers:
        table.add_column(header, justify="left" if header in ("result",) else "right", no_wrap=True)
    for check in report.batches:
        host, emu_float, host_float = check.emulated_vs_host, check.emulated_vs_float, check.host_vs_float
        table.add_row(
            str(check.batch), _num(host.get("max_abs")), _num(check.bound),
            f"{host['cosine']:.6f}" if "cosine" in host else "–",
            f"{host['top1_agreement']:.0%}" if "top1_agreement" in host else "–",
            _num(emu_float.get("max_abs")), _num(host_float.get("max_abs")),
            "ok" if check.passed else f"FAIL: {check.reason}",
        )
    return table


def footer(report) -> list[str]:
    emu, host, seconds = report.emulation, report.host, report.seconds
    runtime = emu.get("runtime") or {}
    host_runtime = host.get("runtime") or {}
    native = emu.get("launcher") == "qemu-user"  # a native bundle: edgekit-run, no Python (edgekit.emulate.native)
    userland = f"Debian {emu['debian_release']}" if emu.get("debian_release") else f"libraries of {emu.get('sysroot')}"
    lines = [
        f"emulated: {userland} {emu.get('machine')}, "
        + ("no Python" if native else f"Python {emu.get('python')}")
        + f", {runtime.get('name')} {runtime.get('version')}, qemu {emu.get('qemu')} (cpu {emu.get('qemu_cpu')}, "
          f"via {emu.get('launcher')})",
        f"host:     {host.get('machine')}, Python {host.get('python')}, {host_runtime.get('name')} {host_runtime.get('version')}",
        f"tolerance: {report.tolerance.describe()}",
    ]
    if native and "expected_tokens" in emu:
        figures = emu.get("generate") or {}
        tps = figures.get("decode_tokens_per_s")
        exact = emu.get("bit_identical")
        lines.append("tokens: " + ("the same greedy ids as this host's" if exact else
                                   "parted from this host's at a near-tie" if report.passed else "NOT this host's ids")
                     + (f"; decode under QEMU {tps:.1f} tokens/s (not the device's speed)" if tps else ""))
    elif native:
        exact = "bit-identical to" if emu.get("bit_identical") else "within tolerance of"
        lines.append(f"outputs: {exact} this host's")
    if native:
        entry = emu.get("entry_point")
        if entry:
            state = "ok" if entry.get("ok") else f"FAILED (exit {entry.get('exit_code')})"
            lines.append(f"entry point: {entry['command']} in a root without Python: {state}: {entry.get('verdict') or entry.get('error', '')}")
    own = report.bundle_check
    if own is not None:
        limits = ", ".join(f"{k} {v:g}" for k, v in (own.get("limits") or {}).items()) or "its cosine floor"
        lines.append(f"bundle check: {own.get('command')} ({limits}) on the emulated outputs: "
                     + ("ok" if own.get("ok") else "FAILED: " + "; ".join(own.get("failures") or ())))
    runner_name = "edgekit-run" if native else "runner.py"
    bench = report.bench
    if bench is not None:
        if bench.get("ok"):
            runs = bench["result"]["timing"]["runs"]
            lines.append(f"bench: {bench['status']}: {runner_name} completed {runs} timed runs (mode \"emulated\"); {bench['note']}")
        else:
            lines.append(f"bench: {bench['status']}: {runner_name} FAILED: {bench.get('error')}")
    served = report.serve
    if served is not None:
        if served.get("ok"):
            lines.append(f"serve: serve.py answered /v1/predict at batch {', '.join(str(b['batch']) for b in served['batches'])} "
                         f"under emulation like the emulated probe, and stopped on SIGTERM with exit 0")
        else:
            lines.append(f"serve: serve.py FAILED under emulation: {served.get('error')}")
    if native:
        lines.append(f"times: emulated model run {seconds.get('emulated_run', 0):.1f} s, total {seconds.get('total', 0):.1f} s")
    else:
        rootfs = f"{seconds.get('rootfs', 0):.1f} s ({'built' if emu.get('rootfs_built') else 'cached'})"
        venv = f"{seconds.get('venv', 0):.1f} s ({'installed' if emu['venv'].get('built') else 'cached'})"
        lines.append(f"times: rootfs {rootfs}, venv {venv}, emulated model run {seconds.get('emulated_run', 0):.1f} s, "
                     f"total {seconds.get('total', 0):.1f} s")
    lines += [f"note: {note}" for note in report.notes]
    lines.append("PASS: the emulated aarch64 board reproduces this host's outputs" if report.passed
                 else f"FAIL: {report.failure()}")
    return lines
