#!/usr/bin/env bash
# Release builds of `roost` at older commits, for Benchmarks/spine/attribute.sh.
#
#   Benchmarks/spine/build-commits.sh COMMIT…
#
# Builds each COMMIT, oldest first as given, in one detached worktree
# (.build/attribute/worktree, so each build after the first is incremental)
# and copies its binary to .build/attribute/bin/COMMIT. A binary already there
# is kept. Prints LABEL=BINARY for each, the arguments attribute.sh takes.
# Built as the Makefile builds release (`--static-swift-stdlib
# --experimental-lto-mode=full`, decisions 0093 and 0094), whatever the
# commit's own Makefile said, so that builds compare alike.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
tree="$root/.build/attribute/worktree"
bins="$root/.build/attribute/bin"
mkdir -p "$bins"
git worktree prune  # a worktree whose directory went with `make clean`
if [ ! -d "$tree" ]; then git worktree add -q --detach "$tree" HEAD; fi
for commit in "$@"; do
  git rev-parse -q --verify "$commit^{commit}" > /dev/null || { echo "not a commit: $commit" >&2; exit 2; }
  if [ ! -x "$bins/$commit" ]; then
    git -C "$tree" checkout -q --detach "$commit"
    started=$(date +%s)
    (cd "$tree" && swift build -c release --static-swift-stdlib --experimental-lto-mode=full --product roost > "$bins/$commit.log" 2>&1) \
      || { echo "the build of $commit failed: $bins/$commit.log" >&2; exit 1; }
    cp "$(cd "$tree" && swift build -c release --show-bin-path)/roost" "$bins/$commit"
    echo "built $commit in $(($(date +%s) - started)) s" >&2
  fi
  printf '%s=%s\n' "$commit" "$bins/$commit"
done
