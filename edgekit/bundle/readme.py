"""README.txt of a bundle: how to install the runtime on the board, check the model, time it."""

from __future__ import annotations

from edgekit.bundle.layout import CHECK_OUTPUTS, CHECKSUMS, REQUIREMENTS, RUNNER, WHEELS_DIR

VENV = "~/edgekit-venv"


def readme_text(info: dict, bundle_name: str, description: str = "") -> str:
    """The README for a bundle described by ``info`` (the content of bundle.json)."""
    model, target, threads = info["model"], info["target"], info.get("threads")
    runtime = info["runtime"]
    title = f"edgekit bundle: {info.get('variant') or model} for {target}"
    no_deps = " --no-deps" if info.get("pip_no_deps") else ""  # exactly the pinned list
    offline = f"pip install{no_deps} --no-index --find-links {WHEELS_DIR} -r {REQUIREMENTS}"
    if info.get("wheels"):
        wheels_note = (f"   This bundle carries the wheels ({WHEELS_DIR}/, for {info['python_platform']}, "
                       f"Python {info['python_version']}), so the board needs no network:\n     {offline}\n")
    else:
        wheels_note = (f"   With network access:\n     pip install{no_deps} -r {REQUIREMENTS}\n"
                       f"   For an offline board, rebuild the bundle with `edgekit bundle --wheels`, then:\n"
                       f"     {offline}\n")
    thread_flag = f" --threads {threads}" if threads else ""
    lines = [
        title,
        "=" * len(title),
        *([description] if description else []),
        f"model: {model} ({info['format']}, {info.get('precision', 'fp32')}), "
        f"runtime: {runtime['name']} {runtime['version']}, numpy: see {REQUIREMENTS}",
        f"made by edgekit {info.get('edgekit_version', '?')} at {info.get('created', '?')}",
        "",
        "1. Check that every file arrived intact:",
        f"     sha256sum -c {CHECKSUMS}",
        "",
        "2. Install the runtime into a virtual environment (Raspberry Pi OS refuses",
        "   system-wide pip installs):",
        f"     python3 -m venv {VENV}",
        f"     . {VENV}/bin/activate",
        wheels_note.rstrip("\n"),
        "",
        "3. Check that the model computes what the host computed (max_abs, cosine and top-1",
        "   agreement against the float reference; the host's figures are in bundle.json,",
        "   \"host_check\"). It prints a JSON report, then a last line PASS: or FAIL: (exit code 0 or 1):",
        f"     python3 {CHECK_OUTPUTS}",
        "",
        "4. Benchmark (prints the edgekit bench JSON document):",
        f"     python3 {RUNNER} {model} --target {target}{thread_flag}",
        f"   or, from the host, beside the {bundle_name}/ folder:",
        f"     edgekit bench {bundle_name} --host pi@raspberrypi.local --remote-python {VENV}/bin/python",
        "",
    ]
    serve = info.get("serve")
    if serve:
        lines += [
            "5. Serve the model over HTTP (FastAPI + uvicorn + onnxruntime; no edgekit, no torch):",
            f"     pip install -r {serve['requirements']}",
            f"     python3 {serve['script']} --port 8000            # http://127.0.0.1:8000/v1/predict",
            f"     python3 {serve['script']} --host 0.0.0.0 --api-key KEY   # from the network: key required",
            "",
        ]
    return "\n".join(lines)


def native_readme_text(info: dict, bundle_name: str, description: str = "") -> str:
    """The README of a native bundle (``edgekit.bundle.native``): nothing to install on the board."""
    model, target = info["model"], info["target"]
    native = info["native"]
    title = f"edgekit native bundle: {info.get('variant') or model} for {target}"
    built_for = native["arch"] + (f" / {native['cpu']}" if native.get("cpu") else "")
    return "\n".join([
        title,
        "=" * len(title),
        *([description] if description else []),
        f"model: {model} ({info['format']}, {info.get('precision', 'fp32')}), run by edgekit-run "
        f"({native.get('runtime_label') or 'ExecuTorch ' + str(native.get('executorch_version'))}, built for {built_for})",
        f"made by edgekit {info.get('edgekit_version', '?')} at {info.get('created', '?')}",
        "No Python, pip or network is needed on the board: the folder runs as it is, from anywhere.",
        "",
        "1. Check that every file arrived intact, then that the model computes what the host computed",
        "   (a JSON report, then a last line PASS: or FAIL:, exit code 0 or 1):",
        f"     sh {native['entry']} verify",
        "",
        "2. Benchmark (prints the edgekit bench JSON document):",
        f"     sh {native['entry']} bench",
        f"   or, from the host, beside the {bundle_name}/ folder:",
        f"     edgekit bench {bundle_name} --host pi@raspberrypi.local",
        "",
        f"3. What the program takes and needs: sh {native['entry']} info",
        "",
        "Licences of the runtime in lib/ and of edgekit-run's libraries: THIRD_PARTY_NOTICES.txt.",
        "",
    ])
