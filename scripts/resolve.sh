#!/usr/bin/env bash
# Builds and tests the workspace with its dependencies resolved afresh, as users get them:
#
#   bash scripts/resolve.sh newest    # a copy of the workspace after `cargo update`
#   bash scripts/resolve.sh oldest    # a copy with every direct dependency of the published
#                                     # crates at its declared minimum (scripts/pin-oldest.py)
#   bash scripts/resolve.sh new-app   # a new application outside the workspace (scripts/new-app):
#                                     # path dependency, no lockfile, a Claimable model, claims on
#                                     # SQLite
#
# The workspace's own Cargo.lock pins what the full suite runs with; these passes make sure a
# requirement such as `diesel = "2.4"` holds at both of its ends. `newest` builds everything
# (`--workspace --all-features --bins --tests`), `oldest` the published crates, the integration
# suite and the CLI; both run a fast part: the library crates' unit tests and doctests and the
# integration suite's SQLite tests. When `cargo update` changes nothing, `newest` says so and
# stops: the full suite has just run those exact versions.
#
# scripts/test.sh runs all three after its full run (needs DIESEL_LEASE_TEST_PG for the unit
# tests, as there). The copies build in target/resolve/, one target directory for all three, so
# what they share is built once.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=${1:-}
case "$MODE" in newest | oldest | new-app) ;; *)
    echo "usage: bash scripts/resolve.sh newest|oldest|new-app" >&2
    exit 2
    ;;
esac
export CARGO_TARGET_DIR=${DIESEL_LEASE_RESOLVE_TARGET:-$ROOT/target/resolve}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/diesel-lease-$MODE.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if [ "$MODE" = new-app ]; then
    mkdir -p "$WORK/src"
    sed "s|@DIESEL_LEASE@|$ROOT/diesel-lease|" "$ROOT/scripts/new-app/Cargo.toml.in" >"$WORK/Cargo.toml"
    cp "$ROOT/scripts/new-app/src/main.rs" "$WORK/src/"
    cd "$WORK"
    cargo run --quiet
    echo "resolved: $(cargo tree --quiet --depth 1 -e normal | sed -n 's/^[├└]── //p' | tr '\n' ' ')"
    exit 0
fi

# The workspace as it is in the work tree (tracked and new files, not ignored ones).
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard) |
    while IFS= read -r -d '' f; do
        [ -e "$ROOT/$f" ] && printf '%s\0' "$f"
    done | (cd "$ROOT" && xargs -0 cp --parents -t "$WORK")
cd "$WORK"

if [ "$MODE" = newest ]; then
    cargo update 2>&1 | grep -E '^ *(Updating|Adding|Removing|Downgrading) ' | grep -v 'crates.io index' || true
    if cmp -s Cargo.lock "$ROOT/Cargo.lock"; then
        echo "newest: Cargo.lock already holds the newest compatible versions; the full suite ran them"
        exit 0
    fi
else
    python3 scripts/pin-oldest.py
fi

# `newest` builds every package (what a contributor gets after `cargo update`); `oldest` the
# three published crates, the integration suite and the CLI its `ops::` tests run: the
# benchmark and the examples are not published, that build is cold, and the benchmark's peers
# alone would double it.
if [ "$MODE" = newest ]; then
    PACKAGES=(--workspace)
else
    PACKAGES=(-p lease-core -p lease-derive -p diesel-lease -p diesel-lease-tests -p diesel-lease-cli)
fi
LIBRARIES=(-p lease-core -p lease-derive -p diesel-lease)
cargo build "${PACKAGES[@]}" --all-features --bins --tests
cargo test "${LIBRARIES[@]}" --all-features --lib
cargo test "${LIBRARIES[@]}" --all-features --doc
DIESEL_LEASE_TEST_BACKENDS=sqlite DIESEL_LEASE_TEST_REQUIRE=sqlite \
    cargo nextest run "${PACKAGES[@]}" --all-features --no-fail-fast -E 'test(/sqlite::/)'
