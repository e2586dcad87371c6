#!/usr/bin/env bash
# The main job on a machine without GPU or internet: makes the example stack's upstream sources
# locally, points rocmforge at them with a URL rewrite, and shows the plan for the example stack.
#   ci/example.sh [extra rocmforge args]
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
root=${ROCMFORGE_EXAMPLE_DIR:-$target/example}
ci/example-sources.sh "$root/upstream" >/dev/null
cat > "$root/config.toml" <<TOML
cache-dir = "$root/cache"
work-dir = "$root/work"
state-dir = "$root/state"

[url-rewrite]
"https://example.invalid/rocmforge/hipvec-1.0.0.tar.gz" = "file://$root/upstream/files/hipvec-1.0.0.tar.gz"
"https://example.invalid/rocmforge/" = "file://$root/upstream/git/"
TOML
cargo build --quiet --release
export ROCMFORGE_CONFIG="$root/config.toml"
rf=$target/release/rocmforge
$rf --stack example plan pyvec --target "${TARGET:-gfx1010}"
$rf --stack example build pyvec --target "${TARGET:-gfx1010}" "$@"
prefix=$root/state/prefix/example
echo "GPU code in libhipvec.so:"; roc-obj-ls "$prefix/lib/libhipvec.so" || true
echo "wheels in the local index: $($rf index url)"; $rf index list
