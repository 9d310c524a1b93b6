#!/usr/bin/env python3
"""Pins every direct registry dependency of the published crates to the oldest version its
requirement allows, in the workspace of the current directory (`cargo update --precise`).

    python3 scripts/pin-oldest.py            # pin, then print what was pinned
    python3 scripts/pin-oldest.py --list     # print the requirements and their minimums only

Nightly's `-Z minimal-versions` is not available on a stable toolchain; this pins what a user's
`Cargo.toml` can actually name, the published crates' own requirements (lease-core, lease-derive,
diesel-lease: normal and build dependencies, optional ones included), and leaves everything
deeper at the newest compatible version, as a user's fresh resolve would. A requirement whose
minimum no longer resolves (another dependency needs a newer one) fails here, loudly: the
declared minimum is then a promise the crate cannot keep and must be raised.
"""

import json
import re
import subprocess
import sys

PUBLISHED = {"lease-core", "lease-derive", "diesel-lease"}


def minimum(req):
    """The oldest version a Cargo requirement such as `2.4`, `^0.8`, `~1.2`, `>=1, <2` allows."""
    first = req.split(",")[0].strip()
    match = re.match(r"^(\^|~|>=|=)?\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?$", first)
    if not match:
        sys.exit(f"pin-oldest: cannot read the requirement `{req}`")
    _, major, minor, patch = match.groups()
    return f"{major}.{minor or 0}.{patch or 0}"


def cargo(*args, capture=True):
    return subprocess.run(["cargo", *args], check=True, text=True, capture_output=capture).stdout


def main():
    meta = json.loads(cargo("metadata", "--format-version", "1", "--all-features"))
    locked = {}
    for package in meta["packages"]:
        locked.setdefault(package["name"], []).append(package["version"])
    wanted = {}
    for package in meta["packages"]:
        if package["name"] not in PUBLISHED or package["source"] is not None:
            continue
        for dep in package["dependencies"]:
            if dep["kind"] == "dev" or dep.get("path") or dep["source"] is None:
                continue
            wanted.setdefault(dep["name"], set()).add(dep["req"])
    pins = []
    for name, reqs in sorted(wanted.items()):
        # Two crates asking different minimums of one dependency: the newer minimum is what
        # the pair can resolve to.
        oldest = max((minimum(r) for r in reqs), key=lambda v: tuple(map(int, v.split("."))))
        major = oldest.split(".")[0] if oldest.split(".")[0] != "0" else ".".join(oldest.split(".")[:2])
        current = [v for v in locked.get(name, []) if v == major or v.startswith(major + ".")]
        if not current:
            sys.exit(f"pin-oldest: {name} {sorted(reqs)} is not in Cargo.lock")
        pins.append((name, sorted(reqs), current[0], oldest))
    for name, reqs, current, oldest in pins:
        print(f"{name:20} {', '.join(reqs):12} locked {current:10} oldest {oldest}")
    if "--list" in sys.argv:
        return
    failed = []
    for name, _, current, oldest in pins:
        if current == oldest:
            continue
        done = subprocess.run(
            ["cargo", "update", "-p", f"{name}@{current}", "--precise", oldest],
            text=True,
            capture_output=True,
        )
        if done.returncode != 0:
            failed.append(f"{name} {oldest}:\n{done.stderr.strip()}")
    if failed:
        sys.exit("pin-oldest: these declared minimums do not resolve:\n\n" + "\n\n".join(failed))
    print("pinned every direct dependency of the published crates to its declared minimum")


if __name__ == "__main__":
    main()
