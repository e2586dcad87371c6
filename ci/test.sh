#!/usr/bin/env bash
# The test command: installs the test prerequisites (ci/setup.sh), then checks formatting and
# lints, then runs every unit test and the integration-test binary (real git daemon, HTTP
# servers, cmake/ninja, hipcc, pip, uv).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh
export ROCMFORGE_TEST_WHEELHOUSE="$PWD/target/wheelhouse"
# A fixed number of generated cases per property test (`props::` modules); ci/proptest-long.sh
# runs many more.
export PROPTEST_CASES="${PROPTEST_CASES:-64}"
cargo fmt --check
cargo clippy --quiet --all-targets -- -D warnings
cargo test --quiet --lib --test it -- --test-threads="${TEST_THREADS:-4}" "$@"
