#!/usr/bin/env bash
# Debian unstable's ROCm 6.4 packages for the installation tests (tests/it/installation.rs):
# downloads them with apt (unstable's package lists in a directory of their own, this host's apt
# untouched), unpacks only the files the tests read into target/debian-rocm/root, and records
# them in a dpkg database there as an install would (status paragraph from each package's
# control, file list from its contents), so the tests read versions per package from dpkg.
# librocblas4 is 280 MB: only its gfx1010 Tensile code objects are unpacked. rocm-device-libs-21
# keeps its CMake package where CMAKE_PREFIX_PATH does not look (lib/llvm-21/lib/cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/target/debian-rocm
packages=(librocblas4 librocblas-dev libamdhip64-6 libamdhip64-dev librocfft0 rocm-device-libs-21)
[ -f "$out/done" ] && [ "$(cat "$out/done")" = "${packages[*]}" ] && exit 0
rm -rf "$out/root" "$out/done"
mkdir -p "$out/apt/lists/partial" "$out/apt/cache/archives/partial" "$out/debs" "$out/root/var/lib/dpkg/info"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "debian-rocm: $keyring is missing (apt-get install debian-archive-keyring)" >&2; exit 1; }
echo "deb [signed-by=$keyring] http://deb.debian.org/debian unstable main" > "$out/apt/sources.list"
apt_opts=(-q -o "Dir::State::Lists=$out/apt/lists" -o "Dir::Etc::SourceList=$out/apt/sources.list"
  -o Dir::Etc::SourceParts=/dev/null -o "Dir::Cache=$out/apt/cache" -o Dir::State::status=/dev/null
  -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$out/debs" && rm -f ./*.deb && apt-get "${apt_opts[@]}" download "${packages[@]}" >/dev/null)
status=$out/root/var/lib/dpkg/status
: > "$status"
for deb in "$out"/debs/*.deb; do
  pkg=$(dpkg-deb -f "$deb" Package)
  case "$pkg" in
    librocblas4) dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$out/root" --wildcards \
                   './usr/lib/x86_64-linux-gnu/rocblas/*/library/*gfx1010*' ;;
    *) dpkg-deb -x "$deb" "$out/root" ;;
  esac
  { dpkg-deb -f "$deb" | sed '/^Package:/a Status: install ok installed'; echo; } >> "$status"
  dpkg-deb -c "$deb" | awk '{print $6}' | sed -e 's#^\./#/#' -e 's#/$##' -e '/^$/d' \
    > "$out/root/var/lib/dpkg/info/$pkg:amd64.list"
done
echo "${packages[*]}" > "$out/done"
echo "debian-rocm: $(ls "$out"/debs | wc -l) packages in $out/debs, the files the tests read in $out/root"
