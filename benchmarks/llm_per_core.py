"""Instructions per token on the Pi's cores: llama.cpp at its best against edgekit's int4 program.

SmolLM2-135M, the protocol's 128 prompt ids (llm_protocol.py) in one call, then STEPS greedy decode
steps, 1 thread, KV cache of 256 positions, counted under ``qemu-aarch64 -cpu cortex-a72`` (Pi 4)
and ``-cpu cortex-a76`` (Pi 5) with edgekit's counting plugin. Both programs mark their prompt
(prefill marks) and their decode steps (the timed marks) the same way, so from one process each:

    per prompt token  = prefill window / 128
    per decoded token = decode window / STEPS      (counts are exact: repeated runs agree)

llama.cpp: llama-cpp-python 0.3.36's vendored source, cross-built with its own CMake for each core
(``-mcpu=cortex-a72``: armv8-a, no dot product; ``-mcpu=cortex-a76``: armv8.2-a + dotprod + fp16),
GGML_NATIVE=OFF, static; driven by benchmarks/llamacpp_counted.c (linked against libllama). Types:
the package's Q4_1 file and Q4_0, Q8_0, Q4_K_M made from it by llama.cpp's own quantizer
(llama_model_quantize with allow_requantize, from a host build: benchmarks/llamacpp_quantize.c).
edgekit: ``edgekit-run generate`` of native bundles of the int4 program (edgekit.llm.counts).

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d WORK/sdist && tar xzf ... -C WORK
    edgekit quantize smol256 --method int4 --target rpi5 --out smol256-int4     # from the Q4_1 GGUF
    edgekit bundle smol256-int4 --target rpi4 --out dist/smol-rpi4
    edgekit bundle smol256-int4 --target rpi5 --out dist/smol-rpi5
    .venv/bin/python benchmarks/llm_per_core.py --work /work/llamacpp2 \\
        --bundle cortex-a72=dist/smol-rpi4 --bundle cortex-a76=dist/smol-rpi5 [--steps 8] [--json out.json]

Needs qemu-user, crossbuild-essential-arm64, cmake, ninja and QEMU's plugin header (.ci/setup).
The builds (three of libllama: two cores and the host's, for the quantizer) take a while once; later runs reuse them.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import llm_protocol as P  # noqa: E402

VERSION = "0.3.36"
CORES = ("cortex-a72", "cortex-a76")
TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q4_K_M")
LIBRARIES = ["src/libllama.a", "ggml/src/libggml.a", "ggml/src/libggml-cpu.a", "ggml/src/libggml-base.a"]
CMAKE = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF",
         "-DGGML_OPENMP=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
         "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_COMMON=OFF", "-DLLAMA_OPENSSL=OFF"]
TOOLCHAIN = """set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
"""
SYSROOT = "/usr/aarch64-linux-gnu"


def run(argv, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))[:300]} failed:\n{(done.stderr or done.stdout)[-3000:]}")
    return done


def source(work: Path) -> Path:
    src = work / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if not (src / "CMakeLists.txt").is_file():
        sys.exit(f"no llama.cpp source at {src}: pip download --no-deps --no-binary :all: "
                 f"llama-cpp-python=={VERSION} -d {work}/sdist, then untar it in {work}")
    return src


def cross_build(work: Path, src: Path, cpu: str) -> Path:
    """llama.cpp's libraries for ``cpu`` and the counted driver linked against them (static)."""
    build = work / f"build-{cpu}"
    driver = build / "llamacpp_counted"
    if driver.is_file() and driver.stat().st_mtime > (HERE / "llamacpp_counted.c").stat().st_mtime:
        return driver
    toolchain = work / "aarch64.cmake"
    toolchain.write_text(TOOLCHAIN)
    if not all((build / lib).is_file() for lib in LIBRARIES):
        run(["cmake", "-S", src, "-B", build, *CMAKE, "-DLLAMA_BUILD_TOOLS=OFF", f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
             f"-DCMAKE_C_FLAGS=-mcpu={cpu}", f"-DCMAKE_CXX_FLAGS=-mcpu={cpu}"])
        run(["cmake", "--build", build, "-j2", "--target", "llama"])
    run(["aarch64-linux-gnu-g++", "-O2", f"-mcpu={cpu}", "-static", "-x", "c", HERE / "llamacpp_counted.c", "-x", "none",
         "-I", src / "include", "-I", src / "ggml" / "include", *[build / lib for lib in LIBRARIES],
         "-lpthread", "-lm", "-o", driver])
    return driver


def quantized(work: Path, src: Path, q4_1: Path) -> dict[str, Path]:
    """The package's Q4_1 file and the other types re-quantized from it by llama.cpp's own quantizer
    (llama_model_quantize, linked from a host build of libllama: benchmarks/llamacpp_quantize.c)."""
    build = work / "build-host"
    tool = build / "llamacpp_quantize"
    if not tool.is_file():
        if not all((build / lib).is_file() for lib in LIBRARIES):
            run(["cmake", "-S", src, "-B", build, *CMAKE, "-DLLAMA_BUILD_TOOLS=OFF"])
            run(["cmake", "--build", build, "-j2", "--target", "llama"])
        run(["g++", "-O2", "-x", "c", HERE / "llamacpp_quantize.c", "-x", "none", "-I", src / "include",
             "-I", src / "ggml" / "include", *[build / lib for lib in LIBRARIES], "-lpthread", "-lm", "-o", tool])
    files = {"Q4_1": q4_1}
    for kind in TYPES:
        out = work / "models" / f"SmolLM2-135M-Instruct.{kind}.gguf"
        if kind != "Q4_1" and not out.is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            run([tool, q4_1, out.with_suffix(".tmp"), kind])
            out.with_suffix(".tmp").rename(out)
        files.setdefault(kind, out)
    return files


def counted(argv: list, cpu: str, plugin: Path) -> tuple[dict, str]:
    """The plugin's counts for one aarch64 process, and what it printed."""
    from edgekit.emulate.icount import parse_log

    tag = secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="llm-per-core-") as tmp:
        log = Path(tmp) / "icount.log"
        done = run(["qemu-aarch64", "-cpu", cpu, "-L", SYSROOT, "-plugin", f"{plugin},tag={tag}", "-d", "plugin",
                    "-D", log, *argv], timeout=3600)
        counts = parse_log(log.read_text(), tag)
    if (counts["windows"], counts["bad_marks"], counts["prefill"]["windows"], counts["prefill"]["bad_marks"]) != (1, 0, 1, 0):
        sys.exit(f"{argv[0]} did not mark its prompt and its decode steps once each: {counts}")
    return counts, done.stdout


def per_token(counts: dict, steps: int) -> dict:
    return {"prompt": counts["prefill"]["total"] / P.PROMPT_TOKENS, "decode": counts["window"]["total"] / steps,
            "decode_simd_fp": counts["window"]["simd_fp"] / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="holds llama_cpp_python-0.3.36/ and the builds")
    parser.add_argument("--bundle", action="append", default=[], metavar="CORE=DIR",
                        help="a native bundle of the int4 program for that core (cortex-a72=dist/smol-rpi4); "
                        "repeatable, also for one core: programs side by side, each named by its folder")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from edgekit.emulate.bundle import open_bundle
    from edgekit.emulate.host import qemu_version
    from edgekit.llm.counts import count_generate
    from edgekit.emulate.icount_plugin import plugin_library, plugin_qemu

    plugin = plugin_library(qemu_version(plugin_qemu()))
    src = source(args.work)
    gguf = P.smollm2_gguf()
    prompt = P.prompt_ids(gguf)
    ids = ",".join(map(str, prompt))
    files = quantized(args.work, src, gguf)
    bundles: dict[str, list[str]] = {}
    for item in args.bundle:
        cpu, _, folder = item.partition("=")
        bundles.setdefault(cpu, []).append(folder)
    rows = []
    for cpu in CORES:
        driver = cross_build(args.work, src, cpu)
        for kind in args.types.split(","):
            counts, out = counted([driver, files[kind], args.steps, ids], cpu, plugin)
            rows.append({"cpu": cpu, "runtime": "llama.cpp", "type": kind, **per_token(counts, args.steps),
                         "ids": [int(i) for i in out.split(",")]})
            print(f"{cpu} llama.cpp {kind}: {rows[-1]['prompt'] / 1e6:.2f} M / prompt token, "
                  f"{rows[-1]['decode'] / 1e6:.2f} M / decoded token", flush=True)
        for folder in bundles.get(cpu, []):
            c = count_generate(open_bundle(Path(folder)), cpu, steps=args.steps, prompt_ids=prompt)
            kind = "int4 .pte" if len(bundles[cpu]) == 1 else Path(folder).name
            print(f"{cpu} edgekit-run {kind}: {c['per_prompt_token'] / 1e6:.2f} M / prompt token, "
                  f"{c['per_decoded_token'] / 1e6:.2f} M / decoded token", flush=True)
            rows.append({"cpu": cpu, "runtime": "edgekit-run", "type": kind, "prompt": c["per_prompt_token"],
                         "decode": c["per_decoded_token"], "decode_simd_fp": c["decode"]["simd_fp"] / args.steps,
                         "ids": c["tokens"]})
    print(f"\nSmolLM2-135M, {P.PROMPT_TOKENS} prompt ids in one call, {args.steps} decode steps, 1 thread, "
          f"aarch64 instructions per token (M) under QEMU")
    print(f"{'core':<11} {'runtime':<12} {'type':<16} {'/prompt tok':>12} {'/decoded tok':>13} {'SIMD/FP':>8}  "
          f"{'x best (prompt, decode)':>24}")
    summary = {}
    for cpu in CORES:
        mine = [r for r in rows if r["cpu"] == cpu]
        ours = [r for r in mine if r["runtime"] == "llama.cpp"]
        best = min(ours, key=lambda r: r["decode"])
        best_prompt = min(ours, key=lambda r: r["prompt"])
        for r in mine:
            r["x_best"] = (r["prompt"] / best_prompt["prompt"], r["decode"] / best["decode"])
            print(f"{cpu:<11} {r['runtime']:<12} {r['type']:<16} {r['prompt'] / 1e6:>12.2f} {r['decode'] / 1e6:>13.2f} "
                  f"{r['decode_simd_fp'] / 1e6:>8.2f}  {r['x_best'][0]:>11.2f}x {r['x_best'][1]:>11.2f}x")
        q4_1 = next((r for r in ours if r["type"] == "Q4_1"), None)
        for r in mine:
            if r["runtime"] == "edgekit-run" and q4_1 is not None:  # the int4 program keeps Q4_1's codes
                same = next((i for i, (a, b) in enumerate(zip(r["ids"], q4_1["ids"])) if a != b), len(r["ids"]))
                print(f"  {cpu}: edgekit's greedy ids equal llama.cpp Q4_1's for {same} of {len(r['ids'])}")
        summary[cpu] = {"llamacpp_best_decode": best["type"], "llamacpp_best_prompt": best_prompt["type"]}
        print(f"  {cpu}: llama.cpp's best type: {best['type']} (decode), {best_prompt['type']} (prompt)")
    if args.json:
        args.json.write_text(json.dumps({"steps": args.steps, "rows": rows, "best": summary}, indent=1))


if __name__ == "__main__":
    main()
