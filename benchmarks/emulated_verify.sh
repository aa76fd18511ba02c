#!/usr/bin/env bash
# The emulated aarch64 proof CI runs: the default model (digits CNN), static int8, exported as
# ONNX, bundled for rpi4, then `edgekit verify --emulate`: run on a Debian arm64 userland under
# QEMU user-mode emulation (Cortex-A72) and compared with this host's outputs.
#
#   bash benchmarks/emulated_verify.sh [WORK_DIR]      # default WORK_DIR: runs/emulated-verify
#
# Needs root and: apt-get install qemu-user-static binfmt-support debootstrap
# The first run builds the arm64 rootfs with debootstrap (about 4-5 minutes on 2 cores) and
# installs the bundle's requirements from PyPI into a venv inside it (about 1 minute), both
# cached under ${XDG_CACHE_HOME:-~/.cache}/edgekit/rootfs; later runs take seconds.
# tests/test_emulate_e2e.py runs on that cache and downloads nothing, so CI calls this first.
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
quietly "$edgekit" quantize "$work/runs/digits" --method static --calib calib_data/digits --target rpi4 \
  --out "$work/runs/digits-int8"
quietly "$edgekit" export "$work/runs/digits-int8" --format onnx --out "$work/dist"
quietly "$edgekit" bundle "$work/dist" --target rpi4 --out "$work/dist/rpi4"
built=$(date +%s)
echo "emulated_verify: int8 ONNX bundle for rpi4 built in $(( built - start ))s: $work/dist/rpi4"

"$edgekit" verify "$work/dist/rpi4" --emulate --json "$work/verify.json"
echo "emulated_verify: verified under emulation in $(( $(date +%s) - built ))s (report: $work/verify.json)"
