#!/usr/bin/env bash
# The test command: installs the test prerequisites (ci/setup.sh), then runs every unit test
# and the integration-test binary, after clippy (real git daemon, HTTP servers, cmake/ninja, hipcc, pip, uv).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh
export ROCMFORGE_TEST_WHEELHOUSE="$PWD/target/wheelhouse"
cargo build --quiet
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --quiet --all-targets -- -D warnings
else
  echo "NOTE: cargo clippy is not installed here (rustup component add clippy); lints not checked" >&2
fi
cargo test --quiet --lib --test it -- --test-threads="${TEST_THREADS:-4}" "$@"
