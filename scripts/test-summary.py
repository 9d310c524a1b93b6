#!/usr/bin/env python3
"""Summarises cargo-nextest JUnit reports for scripts/test.sh.

    python3 scripts/test-summary.py PASS=path/to/junit.xml [PASS=...]

Prints, over every pass given: the count of tests run, passed, failed and skipped; per group
and backend the count and the summed duration of its tests (they overlap, so the sums add up to
more than the pass's wall time, which the script prints beside); and the 20 slowest tests.
A test's group is the suite's top module (`claim`, `faults`, ...) or, outside the integration
suite, its test binary; its backend is the module named after one (`postgres`, `sqlite`,
`mysql`, `mariadb`, also as `on_<backend>`), else `-`.
"""

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

BACKENDS = ("postgres", "sqlite", "mysql", "mariadb")


def group_and_backend(binary, name):
    parts = name.split("::")
    group = parts[0] if binary.endswith("::suite") and len(parts) > 1 else binary
    backend = "-"
    for part in parts[:-1]:
        part = part[3:] if part.startswith("on_") else part
        if part in BACKENDS:
            backend = part
            break
    return group, backend


def main(args):
    cases = []
    for arg in args:
        label, _, path = arg.partition("=")
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"  ({label}: no report: {e})")
            continue
        for suite in root.iter("testsuite"):
            binary = suite.get("name", "?")
            for case in suite.iter("testcase"):
                outcome = "passed"
                if case.find("failure") is not None or case.find("error") is not None:
                    outcome = "failed"
                elif case.find("skipped") is not None:
                    outcome = "skipped"
                cases.append(
                    (label, binary, case.get("name", "?"), float(case.get("time", "0")), outcome)
                )
    if not cases:
        return
    counts = defaultdict(int)
    for c in cases:
        counts[c[4]] += 1
    print(
        f"  tests: {len(cases)} run ({counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped)"
    )
    by = defaultdict(lambda: [0, 0.0])
    for label, binary, name, secs, _ in cases:
        group, backend = group_and_backend(binary, name)
        entry = by[(label, group, backend)]
        entry[0] += 1
        entry[1] += secs
    print("  time per pass, group and backend (tests; summed test time, the tests overlap):")
    for (label, group, backend), (n, secs) in sorted(by.items()):
        print(f"    {label:<24} {group:<34} {backend:<9} {n:>5}  {secs:>8.1f} s")
    print("  the 20 slowest tests:")
    for label, binary, name, secs, outcome in sorted(cases, key=lambda c: -c[3])[:20]:
        flag = "" if outcome == "passed" else f" ({outcome})"
        print(f"    {secs:>7.1f} s  {name}  [{label}]{flag}")


if __name__ == "__main__":
    main(sys.argv[1:])
