"""The POSIX sh run on the board. Each is a fixed text: every value (paths, python, limits,
runner arguments) reaches it as a positional argument ("$1", "$@"), quoted by ``ssh.command``.
sshd hands the command line to the user's login shell, which only has to split quoted words;
``sh -c`` then runs the script. One line each, ";"-separated, so csh-family login shells parse
them too. Markers on stdout/stderr start with ``edgekit:``; distinct exit codes name failures.

A board needs: sh, timeout, sha256sum, tar, mktemp (coreutils or BusyBox), and a python3 unless the
bundle is native (edgekit-run).
"""

from __future__ import annotations

# "$1" -> absolute base folder in $base: "~" and "~/x" and relative paths are in $HOME.
_BASE = (
    'base=$1; case $base in "~") base=$HOME;; "~/"*) base=$HOME/${base#"~/"};; /*) ;; *) base=$HOME/$base;; esac'
)
# $py: "~/x" -> $HOME/x; a bare name (python3) stays a command looked up in PATH.
_PY = 'case $py in "~/"*) py=$HOME/${py#"~/"};; esac'

EXIT_NO_BUNDLE = 97
EXIT_NO_PYTHON = 98
EXIT_BAD_COPY = 91
EXIT_NO_FOLDER = 90
TIMEOUT_EXITS = (124, 137)  # coreutils/BusyBox timeout: TERM sent (124), or KILL after -k (128 + 9)
KILL_AFTER_S = 5

# probe BASE NAME PYTHON -> one stdout line: edgekit:no-python | edgekit:no-tool T |
# edgekit:have <sha256 of the remote SHA256SUMS> (its files, but wheels/, check out) | edgekit:need
PROBE = "; ".join([
    _BASE,
    "name=$2; py=$3",
    _PY,
    'if ! command -v "$py" >/dev/null 2>&1; then echo "edgekit:no-python"; exit 0; fi',
    'for tool in timeout sha256sum tar mktemp grep; do if ! command -v $tool >/dev/null 2>&1; then echo "edgekit:no-tool $tool"; exit 0; fi; done',
    'd=$base/$name',
    # wheels/ was checked when it arrived and a run does not read it: skip re-hashing it every time
    'if [ -f "$d/SHA256SUMS" ] && (cd "$d" && grep -v "^[0-9a-f]*  wheels/" SHA256SUMS | sha256sum -c) >/dev/null 2>&1; '
    'then echo "edgekit:have $(sha256sum < "$d/SHA256SUMS")"; else echo "edgekit:need"; fi',
])

# receive BASE NAME < tar stream: unpack into a fresh temporary folder beside the final one,
# check SHA256SUMS there, then swap it in. Nothing half-copied is ever under the final name.
RECEIVE = "; ".join([
    _BASE,
    "name=$2; umask 022",
    f'mkdir -p "$base" || exit {EXIT_NO_FOLDER}',
    f'tmp=$(mktemp -d "$base/.incoming.XXXXXX") || exit {EXIT_NO_FOLDER}',
    'if tar -x -f - -C "$tmp" && chmod 755 "$tmp" && (cd "$tmp" && sha256sum -c SHA256SUMS) >/dev/null 2>&1; '
    'then rm -rf "$base/$name" && mv "$tmp" "$base/$name" && echo "edgekit:stored"; '
    f'else rm -rf "$tmp"; echo "edgekit:bad-copy" >&2; exit {EXIT_BAD_COPY}; fi',
])

# run BASE NAME PYTHON LIMIT RUN_ID MODEL [runner args...]: the runner (runner.py with PYTHON, or a
# native bundle's edgekit-run) under `timeout` (its own
# process group, TERM then KILL after the limit), its pid in BASE/.runs/RUN_ID.pid so a
# second connection can stop the whole group (``KILL``). Exit status: the runner's, or 124/137.
RUN = "; ".join([
    _BASE,
    "name=$2; py=$3; limit=$4; run=$5; model=$6; shift 6",
    _PY,
    'd=$base/$name',
    # a Python bundle's runner.py, or a native bundle's edgekit-run (no Python on the board)
    f'if [ -f "$d/runner.py" ]; then if ! command -v "$py" >/dev/null 2>&1; then echo "edgekit:no-python" >&2; '
    f'exit {EXIT_NO_PYTHON}; fi; set -- "$py" "$d/runner.py" "$d/$model" "$@"; '
    f'elif [ -f "$d/edgekit-run" ]; then set -- "$d/edgekit-run" bench "$d/$model" "$@"; '
    f'else echo "edgekit:no-bundle" >&2; exit {EXIT_NO_BUNDLE}; fi',
    'mkdir -p "$base/.runs"',
    ': "${TORCH_CPP_LOG_LEVEL:=ERROR}"; export TORCH_CPP_LOG_LEVEL',  # as edgekit does locally
    f'timeout -k {KILL_AFTER_S} "$limit" "$@" & pid=$!',
    'echo "$pid" > "$base/.runs/$run.pid"',
    'wait "$pid"; rc=$?',
    'rm -f "$base/.runs/$run.pid"',
    'exit $rc',
])

# kill BASE RUN_ID: stop the process group of a run whose connection was lost or timed out.
KILL = "; ".join([
    _BASE,
    'f=$base/.runs/$2.pid',
    'if [ -f "$f" ]; then p=$(cat "$f"); kill -s TERM -- "-$p" 2>/dev/null; sleep 1; '
    'kill -s KILL -- "-$p" 2>/dev/null; rm -f "$f"; fi',
    "exit 0",
])
