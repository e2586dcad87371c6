#!/usr/bin/env bash
# Debian's own libMIOpen builds for the MIOpen audit tests (tests/it/miopen_audit.rs, issue 39):
# unstable's libmiopen1 6.4.3 and experimental's 7.2.4, downloaded with apt (their package lists
# in a directory of their own, this host's apt untouched), each unpacked whole into
# target/debian-miopen/<version>/ (a libMIOpen carries its kernel sources as data symbols; the
# audit reads them out of usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0). Nothing is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/target/debian-miopen
# The versions the tests expect, as unstable's and experimental's Packages lists give them on
# 2026-12-07 (apt refuses a version the lists no longer have, naming it).
wanted=("libmiopen1=6.4.3+dfsg-1+b1" "libmiopen1=7.2.4+dfsg-1")
[ -f "$out/done" ] && [ "$(cat "$out/done")" = "${wanted[*]}" ] && exit 0
rm -rf "$out/done" "$out/debs"
mkdir -p "$out/apt/lists/partial" "$out/apt/cache/archives/partial" "$out/debs"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "debian-miopen: $keyring is missing (apt-get install debian-archive-keyring)" >&2; exit 1; }
{ echo "deb [signed-by=$keyring] http://deb.debian.org/debian unstable main"
  echo "deb [signed-by=$keyring] http://deb.debian.org/debian experimental main"; } > "$out/apt/sources.list"
apt_opts=(-q -o "Dir::State::Lists=$out/apt/lists" -o "Dir::Etc::SourceList=$out/apt/sources.list"
  -o Dir::Etc::SourceParts=/dev/null -o "Dir::Cache=$out/apt/cache" -o Dir::State::status=/dev/null
  -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$out/debs" && apt-get "${apt_opts[@]}" download "${wanted[@]}" >/dev/null)
for deb in "$out"/debs/*.deb; do
  version=$(dpkg-deb -f "$deb" Version)   # 7.2.4+dfsg-1
  dir=$out/${version%%[+-]*}              # 7.2.4
  rm -rf "$dir" && mkdir -p "$dir"
  dpkg-deb -x "$deb" "$dir"
  dpkg-deb -f "$deb" > "$dir/control"
  [ -f "$dir/usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0" ] || {
    echo "debian-miopen: $deb has no usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0" >&2; exit 1; }
done
echo "${wanted[*]}" > "$out/done"
echo "debian-miopen: $(ls "$out"/debs | tr "\n" " ")unpacked in $out/<version>/"
