#!/usr/bin/env bash
# The emulated aarch64 proof CI runs: the default model (digits CNN), static int8, exported as
# ONNX and TorchScript, bundled for rpi4, then `edgekit verify --emulate` on each bundle: run on
# a Debian arm64 userland under QEMU user-mode emulation (Cortex-A72) and compared with this
# host's outputs.
#
# With the executorch extra and the aarch64 cross compiler (crossbuild-essential-arm64) installed,
# the int8 ExecuTorch (.pte) program is also bundled with the native runtime (edgekit-run, no Python
# on the board) and verified the same way (EMULATED_NATIVE=0 skips it): it downloads only the
# executorch aarch64 wheel (18 MB, once). EMULATED_EXECUTORCH=1 also verifies the Python .pte bundle,
# which needs torch's CPU build for aarch64 (PyTorch's CPU index or EMULATED_TORCH_INDEX).
#
# The TorchScript bundle's requirements name PyTorch's CPU index (download.pytorch.org), which
# this CI machine cannot reach; with EMULATED_TORCHSCRIPT=1 it is verified from that index, or from
# EMULATED_TORCH_INDEX (a mirror of it). PyPI's aarch64 torch is a CUDA build (about 4.6 GB) that
# verify refuses to install for a board. Off by default: CI must not depend on gigabytes of wheels.
#
#   bash benchmarks/emulated_verify.sh [WORK_DIR]      # default WORK_DIR: runs/emulated-verify
#
# Needs root and: apt-get install qemu-user-static binfmt-support debootstrap
# The first run builds the arm64 rootfs with debootstrap (about 4-5 minutes on 2 cores) and
# installs the bundle's requirements from PyPI into a venv inside it (about 1 minute for
# onnxruntime, 4 for torch), all
# cached under ${XDG_CACHE_HOME:-~/.cache}/edgekit/rootfs; later runs take seconds.
# tests/emulate/test_emulate_e2e.py runs on that cache and downloads nothing, so CI calls this first.
# Exit status: 0 verified, or skipped with the reason (not root / tools missing); else edgekit's
# (1 mismatch or tool error, 2 bad bundle).
set -euo pipefail
cd "$(dirname "$0")/.."
edgekit=${EDGEKIT:-.venv/bin/edgekit}
work=${1:-runs/emulated-verify}

if [ "$(id -u)" != 0 ]; then
  echo "emulated_verify: SKIPPED: needs root (debootstrap, chroot and mounts)"
  exit 0
fi
for tool in qemu-aarch64-static debootstrap unshare; do
  if ! command -v "$tool" >/dev/null; then
    echo "emulated_verify: SKIPPED: $tool not installed; apt-get install qemu-user-static binfmt-support debootstrap"
    exit 0
  fi
done

start=$(date +%s)
rm -rf "$work"
mkdir -p "$work"
log="$work/build.log"
quietly() {  # the build steps' chatter goes to $log, shown only when a step fails
  "$@" >>"$log" 2>&1 || { status=$?; tail -n 30 "$log" >&2; return "$status"; }
}
quietly "$edgekit" train --model digits-cnn --out "$work/runs/digits"
formats=onnx,torchscript
pte=0
native=0
if "$(dirname "$edgekit")/python" -c "import executorch, torchao" >/dev/null 2>&1; then
  formats=onnx,torchscript,executorch
  [ "${EMULATED_EXECUTORCH:-0}" != 0 ] && pte=1
  [ "${EMULATED_NATIVE:-1}" != 0 ] && command -v aarch64-linux-gnu-g++ >/dev/null && native=1
fi
quietly "$edgekit" quantize "$work/runs/digits" --method static --calib calib_data/digits --target rpi4 \
  --format "$formats" --out "$work/runs/digits-int8"
quietly "$edgekit" export "$work/runs/digits-int8" --format "$formats" --out "$work/dist"
quietly "$edgekit" bundle "$work/dist" --target rpi4 --out "$work/bundles/rpi4"
quietly "$edgekit" bundle "$work/dist" --target rpi4 --format torchscript --out "$work/bundles/rpi4-torchscript"
if [ "$pte" = 1 ]; then
  quietly "$edgekit" bundle "$work/dist" --target rpi4 --format executorch --out "$work/bundles/rpi4-executorch"
fi
if [ "$native" = 1 ]; then
  quietly "$edgekit" bundle "$work/dist" --target rpi4 --format executorch --runtime native --out "$work/bundles/rpi4-native"
fi
built=$(date +%s)
echo "emulated_verify: int8 bundles ($formats) for rpi4 built in $(( built - start ))s under $work/bundles"

"$edgekit" verify "$work/bundles/rpi4" --emulate --json "$work/verify.json"
verified=$(date +%s)
echo "emulated_verify: ONNX bundle verified under emulation in $(( verified - built ))s (report: $work/verify.json)"

# an ncnn Python bundle counted with its own runtime under the counting plugin: caches its venv for
# tests/emulate/test_icount_python.py (downloads ncnn's aarch64 wheel once)
if "$(dirname "$edgekit")/python" -c "import ncnn, pnnx" >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null; then
  quietly "$edgekit" export "$work/runs/digits" --format ncnn --out "$work/dist-ncnn"
  quietly "$edgekit" bundle "$work/dist-ncnn" --target rpi4 --out "$work/bundles/rpi4-ncnn"
  counted=$(date +%s)
  "$edgekit" bench "$work/bundles/rpi4-ncnn" --emulate --emulate-runs 2 --json "$work/count-ncnn.json" >/dev/null
  echo "emulated_verify: ncnn bundle counted under emulation in $(( $(date +%s) - counted ))s (report: $work/count-ncnn.json)"
fi

if [ "${EMULATED_TORCHSCRIPT:-0}" != 0 ]; then
  "$edgekit" verify "$work/bundles/rpi4-torchscript" --emulate ${EMULATED_TORCH_INDEX:+--index-url "$EMULATED_TORCH_INDEX"} \
    --json "$work/verify-torchscript.json"
  echo "emulated_verify: TorchScript bundle verified under emulation in $(( $(date +%s) - verified ))s" \
    "(report: $work/verify-torchscript.json)"
fi

if [ "$native" = 1 ]; then
  native_start=$(date +%s)
  "$edgekit" verify "$work/bundles/rpi4-native" --emulate --json "$work/verify-native.json"
  echo "emulated_verify: native .pte bundle (edgekit-run, no Python) verified under emulation in" \
    "$(( $(date +%s) - native_start ))s (report: $work/verify-native.json)"
fi

if [ "$pte" = 1 ]; then
  # the .pte bundle pins torch from PyTorch's CPU index too: verified from it (or EMULATED_TORCH_INDEX)
  pte_start=$(date +%s)
  "$edgekit" verify "$work/bundles/rpi4-executorch" --emulate ${EMULATED_TORCH_INDEX:+--index-url "$EMULATED_TORCH_INDEX"} \
    --json "$work/verify-executorch.json"
  echo "emulated_verify: ExecuTorch (.pte) bundle verified under emulation in $(( $(date +%s) - pte_start ))s" \
    "(report: $work/verify-executorch.json)"
fi
