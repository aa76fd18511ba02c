#!/usr/bin/env bash
# Install QEMU's plugin API header (qemu-plugin.h) for edgekit's instruction-counting plugin.
# Debian 12's qemu ships it in no binary package: take it from the qemu source package matching the
# installed qemu-user, with a private apt configuration (the system's sources are left as they are).
#   bash fetch_header.sh [DEST]      # DEST default: /usr/local/include/qemu-plugin.h
set -euo pipefail
dest=${1:-/usr/local/include/qemu-plugin.h}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial"
. /etc/os-release
cat > "$work/sources.list" <<LIST
deb-src http://deb.debian.org/debian ${VERSION_CODENAME} main
deb-src http://deb.debian.org/debian-security ${VERSION_CODENAME}-security main
LIST
apt=(apt-get -q -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o Dir::State::Lists="$work/lists" -o APT::Sandbox::User=root)
"${apt[@]}" update >/dev/null
version=$(dpkg-query -W -f='${source:Version}' qemu-user 2>/dev/null || true)
cd "$work"
"${apt[@]}" source --download-only "qemu${version:+=$version}" >/dev/null 2>&1 || "${apt[@]}" source --download-only qemu >/dev/null
tar -xJf qemu_*.orig.tar.* --wildcards --strip-components=3 '*/include/qemu/qemu-plugin.h'
install -D -m 0644 qemu-plugin.h "$dest"
echo "installed $dest"
