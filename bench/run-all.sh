#!/usr/bin/env bash
# Re-measures everything BENCHMARKS.md reports, section by section, on this machine: each run
# writes docs/bench/results-<sections>.json (and the plots), and this script logs the machine's
# load average before and after each run to target/bench/run-all.log, next to the program's
# printed tables (each results file also records the commit it measured and the load average at
# its start and end). The end-to-end sections take medians of 5 rounds, the targets' measure,
# and keep every round's rate (`round_rates`) for the rounds' own ratios printed next to them.
# Run it on a machine that does nothing else; it takes about an hour.
#
#   bash bench/run-all.sh            # every section
#   bash bench/run-all.sh e2e width  # some of them (names as in the list below)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p diesel-lease-bench
bin=target/release/diesel-lease-bench
log=target/bench/run-all.log
mkdir -p target/bench
runs=(
    "claim,batch,guard,lease,semaphore,wake,scale,sqlite"
    "e2e --workers 1,2,4,8 --rounds 5"
    "e2e-mysql --workers 1,2,4,8 --rounds 5"
    "e2e-sqlite --workers 1,2,4,8 --rounds 5"
    "idle"
    "width"
    "depth --rounds 1 --depth-layouts before,recommended,server-defaults"
    "depth10m --rounds 2"
    "steady --rounds 2 --duration 20"
    "instructions"
)
wanted=("$@")
for run in "${runs[@]}"; do
    section=${run%% *}
    if ((${#wanted[@]})); then
        keep=0
        for w in "${wanted[@]}"; do [[ $section == "$w" || $section == "$w,"* ]] && keep=1; done
        ((keep)) || continue
    fi
    extra=()
    [[ $run == *" "* ]] && read -r -a extra <<<"${run#* }"
    {
        echo "=== --only $section ${extra[*]}"
        echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  ($(date -u +%H:%M:%S) UTC)"
    } | tee -a "$log"
    started=$SECONDS
    "$bin" --only "$section" "${extra[@]}" --write-docs 2>&1 | tee -a "$log"
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)  ($(date -u +%H:%M:%S) UTC, $((SECONDS - started)) s)" | tee -a "$log"
done
