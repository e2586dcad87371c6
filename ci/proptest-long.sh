#!/usr/bin/env bash
# The property tests only, with many more generated cases than ci/test.sh runs (64): the recipe
# loader, the patch reader and engine, the archive extractor and the wheel-name parser.
# PROPTEST_CASES=N overrides the count; a failure prints the smallest input found and saves its
# seed under proptest-regressions/ (commit it beside the fix, or turn it into a unit test).
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-5000}"
cargo test --lib -- props:: "$@"
