#!/usr/bin/env bash
# The public API of the diesel-lease crate, as cargo-public-api lists it, against the snapshot
# committed in diesel-lease/public-api.txt, so that every change to the surface shows in review:
#
#   bash scripts/public-api.sh            # check: the diff and exit 1 when the surface changed
#   bash scripts/public-api.sh --update   # rewrite the snapshot after a deliberate change
#
# cargo-public-api reads rustdoc's JSON output, which is unstable: RUSTC_BOOTSTRAP=1 lets the
# stable toolchain (the only one on this machine and in CI) write it. The tool is installed from
# the registry into target/tools at the version below (about five minutes on two cores, once per
# target directory); the JSON is built in target/public-api, apart from the suite's builds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=0.52.0
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TOOLS=$TARGET/tools
SNAPSHOT=$ROOT/diesel-lease/public-api.txt

if ! "$TOOLS/bin/cargo-public-api" --version 2>/dev/null | grep -qF "$VERSION"; then
    cargo install --quiet --locked cargo-public-api --version "$VERSION" --root "$TOOLS"
fi

listed=$(mktemp)
trap 'rm -f "$listed"' EXIT
(
    cd "$ROOT"
    RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$TARGET/public-api PATH="$TOOLS/bin:$PATH" \
        cargo public-api --package diesel-lease --all-features -sss --color never
) >"$listed" 2> >(grep -vE '^ *(Compiling|Checking|Documenting|Finished|Blocking|Locking|Updating|Downloaded?|Downloading) ' >&2)

# The top-level items (types, traits, functions, constants, re-exports; not their members), each
# name once however many paths reach it: issue 54's measure of the surface (at most 100).
top_level() {
    awk '
        { sub(/^(#\[[^]]*\] )+/, ""); $0 = $0 }
        $1 == "pub" && $2 == "mod" { mods[$3] = 1; next }
        $1 == "pub" && $2 ~ /^(struct|enum|trait|fn|type|const|static|macro|union|use)$/ {
            line = $0; sub(/^pub [a-z]+ /, "", line)
            while (gsub(/<[^<>]*>/, "", line)) {}
            match(line, /^[A-Za-z0-9_:]+/); path = substr(line, 1, RLENGTH)
            n = split(path, seg, "::"); parent = seg[1]
            for (i = 2; i < n; i++) parent = parent "::" seg[i]
            if (path ~ /__private/) next
            if ($2 == "use" || parent in mods || parent == "diesel_lease") items[$2 " " seg[n]] = 1
        }
        END { for (k in items) c++; print c + 0 }
    ' "$1"
}

if [ "${1:-}" = --update ]; then
    cp "$listed" "$SNAPSHOT"
    echo "public-api: $(wc -l <"$SNAPSHOT") lines written to diesel-lease/public-api.txt, $(top_level "$SNAPSHOT") top-level items"
    exit 0
fi
if diff -u "$SNAPSHOT" "$listed"; then
    echo "public-api: the surface is the committed snapshot ($(wc -l <"$SNAPSHOT") lines, $(top_level "$SNAPSHOT") top-level items)"
else
    echo "public-api: the public API differs from diesel-lease/public-api.txt (above: - committed, + now)." >&2
    echo "If the change is meant, run: bash scripts/public-api.sh --update, and commit the snapshot." >&2
    exit 1
fi
