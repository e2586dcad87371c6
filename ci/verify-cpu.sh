#!/usr/bin/env bash
# CPU mode of `rocmforge verify`, by hand (not part of ci/test.sh): makes a Python 3.11 venv with
# torch and numpy (PyTorch's CPU index if it answers, else PyPI, whose Linux torch pulls CUDA
# wheels: a few GB, once), then runs the whole verify matrix with ROCMFORGE_VERIFY_DEVICE=cpu:
# every case's program runs on the CPU against its float64 reference. It proves the case
# programs, not a GPU; docs/verify.md records a run.
#   ci/verify-cpu.sh [verify args: --markdown, --json, --case ID, ...]
# ROCMFORGE_VERIFY_CPU_DIR (default <target>/verify-cpu) holds the venv, the config and state.
# On the CPU, torch.compile (the `torch-compile` case) is Inductor's C++ backend, not Triton: it
# needs a C++ compiler (`g++`, or $CXX), without which the case fails saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
root=${ROCMFORGE_VERIFY_CPU_DIR:-$target/verify-cpu}
venv=$root/venv
mkdir -p "$root"

if ! "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; then
  py=""
  if command -v pyenv >/dev/null && p=$(pyenv prefix 3.11 2>/dev/null); then
    py=$(echo "$p" | head -n1)/bin/python3.11
  elif command -v python3.11 >/dev/null; then
    py=$(command -v python3.11)
  fi
  [ -x "$py" ] || { echo "verify-cpu: no Python 3.11 (pyenv install 3.11, or python3.11 on PATH)" >&2; exit 2; }
  start=$SECONDS
  "$py" -m venv "$venv"
  pip=("$venv/bin/python" -m pip install --quiet)
  if ! "${pip[@]}" --timeout 15 --retries 0 --index-url https://download.pytorch.org/whl/cpu torch 2>/dev/null; then
    echo "verify-cpu: PyTorch's CPU index does not answer: torch from PyPI (with its CUDA wheels)" >&2
    "${pip[@]}" torch
  fi
  "${pip[@]}" numpy
  echo "verify-cpu: venv with $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)') in $((SECONDS - start))s" >&2
fi

cxx=${CXX:-g++}
command -v "$cxx" >/dev/null ||
  echo "verify-cpu: no C++ compiler ($cxx) on PATH: torch-compile will fail (Inductor compiles C++ on the CPU)" >&2

cat > "$root/config.toml" <<TOML
state-dir = "$root/state"
cache-dir = "$root/cache"
work-dir = "$root/work"
TOML
cargo build --quiet
start=$SECONDS
status=0
ROCMFORGE_CONFIG="$root/config.toml" ROCMFORGE_VERIFY_DEVICE=cpu \
  "$target/debug/rocmforge" --stack "${VERIFY_STACK:-rocm-6.2}" verify --python "$venv/bin/python" "$@" || status=$?
echo "verify-cpu: the matrix took $((SECONDS - start))s" >&2
exit $status
