#!/usr/bin/env bash
# Makes the example stack's upstream sources from examples/sources/, byte for byte the same on
# every machine (fixed dates, names and modes), so the commit ids and sha256 pinned in
# recipes/example/ hold: two git repositories and one tarball.
#   ci/example-sources.sh OUT   ->  OUT/git/vecmath.git  OUT/git/pyvec.git  OUT/files/hipvec-1.0.0.tar.gz
set -euo pipefail
out=${1:?usage: ci/example-sources.sh OUT_DIR}
src=$(cd "$(dirname "$0")/../examples/sources" && pwd)
mkdir -p "$out/git" "$out/files"
out=$(cd "$out" && pwd)

export GIT_AUTHOR_NAME="rocmforge example" GIT_AUTHOR_EMAIL="example@rocmforge.invalid"
export GIT_COMMITTER_NAME="rocmforge example" GIT_COMMITTER_EMAIL="example@rocmforge.invalid"
export GIT_AUTHOR_DATE="2024-01-01T00:00:00+0000" GIT_COMMITTER_DATE="2024-01-01T00:00:00+0000"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null

for name in vecmath pyvec; do
  bare="$out/git/$name.git"
  [ -d "$bare" ] && continue
  work=$(mktemp -d)
  cp -R "$src/$name/." "$work/"
  chmod -R u=rwX,go=rX "$work"
  git -C "$work" init -q -b main
  git -C "$work" add -A
  git -C "$work" commit -q -m "$name 1.0.0"
  git -C "$work" tag -a v1.0.0 -m "$name 1.0.0"
  git clone -q --bare "$work" "$bare"
  rm -rf "$work"
done

tarball="$out/files/hipvec-1.0.0.tar.gz"
if [ ! -f "$tarball" ]; then
  stage=$(mktemp -d)
  cp -R "$src/hipvec" "$stage/hipvec-1.0.0"
  chmod -R u=rwX,go=rX "$stage"
  tar --sort=name --mtime="2024-01-01 00:00:00Z" --owner=0 --group=0 --numeric-owner \
      --format=gnu -C "$stage" -cf - hipvec-1.0.0 | gzip -n -9 > "$tarball.tmp"
  mv "$tarball.tmp" "$tarball"
  rm -rf "$stage"
fi

git --git-dir="$out/git/vecmath.git" rev-parse 'v1.0.0^{commit}' | sed 's/^/vecmath /'
git --git-dir="$out/git/pyvec.git" rev-parse 'v1.0.0^{commit}' | sed 's/^/pyvec /'
sha256sum "$tarball" | awk '{print "hipvec-1.0.0.tar.gz " $1}'
