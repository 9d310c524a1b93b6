#!/usr/bin/env bash
# Runs the whole diesel-lease test suite against real servers. This is the one command the README
# gives and the one CI runs:
#
#   bash scripts/test.sh [CARGO_ARGS...] [-- TEST_ARGS...]
#   bash scripts/test.sh -- lease::          # only tests whose name contains `lease::`
#
# What it does:
# 1. Starts a throwaway PostgreSQL 15 cluster (temp dir, free port on 127.0.0.1, fsync off).
# 2. Starts a throwaway MariaDB (installing it from Debian's packages when it is missing, as root).
#    If MariaDB cannot be installed or started, the MySQL tests are reported as SKIPPED with the
#    reason, loudly; under CI (CI=true) that is a failure instead, because CI must run them.
#    Then a throwaway PgBouncer in transaction pooling mode in front of that PostgreSQL (installed
#    from Debian's packages when missing; skipped loudly, or failed on CI, the same way).
#    For the PostgreSQL failover tests it exports DIESEL_LEASE_TEST_PG_PAIR, the path of
#    scripts/pg-pair.sh, with which each of those tests starts its own primary + streaming standby.
#    When the Galera library is installed (Debian's galera-4, which mariadb-server pulls in), it
#    also starts a three-node MariaDB Galera cluster in the background, while the build runs, and
#    exports DIESEL_LEASE_TEST_GALERA (the nodes' admin URLs, comma-separated) for
#    tests/faults/galera.rs; without the library those tests are SKIPPED (a failure under CI).
#    Their claim farm is small by default; DIESEL_LEASE_TEST_GALERA_ROWS=5000 runs a large one.
#    It also installs Debian's chromium and chromium-driver when missing, for the browser test of
#    `diesel-lease serve` (cli/tests/serve.rs; skipped loudly, or failed on CI, the same way).
# 3. Exports DIESEL_LEASE_TEST_PG / DIESEL_LEASE_TEST_MYSQL (admin URLs; every test creates its
#    own database), DIESEL_LEASE_TEST_PGBOUNCER (the same PostgreSQL through PgBouncer) and
#    DIESEL_LEASE_TEST_REQUIRE (the servers that must be there: a test of a required one whose URL
#    is missing fails instead of skipping). SQLite needs no server.
# 4. Builds every binary and test target (`cargo build --workspace --all-features --bins
#    --tests`: the suite runs the examples' and its own worker binaries), then runs the tests with
#    cargo-nextest (installed from the registry when missing): unit tests, the integration suite
#    on every backend and the derive's compile-fail cases, each test in a process of its own, many
#    at once (.config/nextest.toml: how many, and the groups that must not overlap). Doctests
#    follow with `cargo test --doc`. A failing test does not stop the others; the summary at the
#    end gives the time per pass, group and backend, the 20 slowest tests, the count, and every
#    failing test by name, with its pass.
# 5. MySQL isolation levels. The suite must hold under REPEATABLE READ (InnoDB's default) and
#    READ COMMITTED. The full pass runs at the first level of DIESEL_LEASE_TEST_ISOLATION
#    (default `repeatable-read,read-committed`); each further level gets a MariaDB server of its
#    own, started at that level, and a second nextest run of only the MySQL-family tests
#    (filters `mysql::` and `mariadb::` unless TEST_ARGS give one;
#    DIESEL_LEASE_TEST_BACKENDS=mysql,mariadb makes the other backends' tests return at once)
#    beside the full pass. During each pass DIESEL_LEASE_TEST_ISOLATION holds that pass's single
#    level, for tests that want to know it. PostgreSQL runs at its default (READ COMMITTED) and
#    SQLite is serializable.
#    Example: DIESEL_LEASE_TEST_ISOLATION=read-committed runs everything once, at that level.
# 6. The public API (full runs only): scripts/public-api.sh lists the crate's public API with
#    cargo-public-api (installed from the registry) and diffs it against the committed snapshot
#    diesel-lease/public-api.txt; a change to the surface fails until the snapshot is updated
#    (`bash scripts/public-api.sh --update`) and so shows in review. Then dependencies resolved
#    afresh (full runs only): scripts/resolve.sh builds and tests copies
#    of the workspace at the newest and at the oldest versions its requirements allow, and a new
#    application outside the workspace that depends on diesel-lease by path with no lockfile.
#    They run in the background beside the test passes (cold builds in target/resolve/), and
#    their logs follow the doctests'.
# 7. Stops both servers and deletes their temp dirs on every exit path (trap), and exits with the
#    tests' status (the first failing pass's cargo status). Ctrl-C reaches cargo and the script
#    alike; a SIGTERM sent to the script's pid alone takes effect when the running cargo ends
#    (bash runs traps between commands), then the servers are stopped as usual.
#
# Server start/stop lives in scripts/servers.sh so the benchmarks can reuse it.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/servers.sh
source "$ROOT/scripts/servers.sh"

# --- arguments: CARGO_ARGS and TEST_ARGS (after --) go to every pass -------------------------
CARGO_ARGS=()
TEST_ARGS=()
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then
        shift
        TEST_ARGS=("$@")
        break
    fi
    CARGO_ARGS+=("$1")
    shift
done

# --- output helpers -------------------------------------------------------------------------
now() { date +%s%N; }
SCRIPT_START=$(now)
SECTION_NAME=
SECTION_START=
elapsed() { # seconds from $1 to $2 (default: now), one decimal
    local ns=$((${2:-$(now)} - $1))
    printf '%d.%d s' $((ns / 1000000000)) $((ns / 100000000 % 10))
}
# CPU seconds the machine has spent busy so far (all cores, every process; see .ci/run), empty
# without /proc/stat. Each section ends with its wall time and the CPU it kept busy: on two
# cores, a section that keeps both busy cannot end sooner than half its CPU seconds.
cpu_busy() {
    [ -r /proc/stat ] || return 0
    awk -v hz="$(getconf CLK_TCK)" '/^cpu /{print int(($2 + $3 + $4 + $7 + $8 + $9) / hz); exit}' /proc/stat
}
cpu_since() { # ", CPU busy N s" since $1 (a cpu_busy reading), or nothing; never fails
    [ -z "$1" ] || echo ", CPU busy $(($(cpu_busy) - $1)) s"
}
SCRIPT_CPU=$(cpu_busy)
SECTION_CPU=
end_section() {
    if [ -n "$SECTION_NAME" ]; then
        echo "--- $SECTION_NAME: $(elapsed "$SECTION_START")$(cpu_since "$SECTION_CPU")"
        SECTION_NAME=
    fi
}
section() {
    end_section
    SECTION_NAME=$1
    SECTION_START=$(now)
    SECTION_CPU=$(cpu_busy)
    echo
    echo "=== $1"
}
loud() { # a message nobody should miss in a long log
    echo
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    echo "!!! $1"
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    echo
}

# The background dependency checks (scripts/resolve.sh), while they run.
RESOLVE_PID=
kill_tree() { # a process and everything it started
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}

# MariaDB servers of the further isolation levels: "directory port pid" each (see below).
MYSQL_LEVEL_STATE=()

# --- cleanup on every exit path, keeping the exit status --------------------------------------
# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "${RESOLVE_PID:-}" ]; then
        echo "stopping the dependency checks still running beside the tests"
        kill_tree "$RESOLVE_PID"
    fi
    section "Stopping servers"
    stop_pgbouncer
    if [ -n "${GALERA_JOB:-}" ]; then wait "$GALERA_JOB" 2>/dev/null || true; fi
    if [ -s "${GALERA_STATE:-}" ]; then
        # shellcheck disable=SC1090
        source "$GALERA_STATE"
    fi
    stop_galera
    rm -f "${GALERA_STATE:-}" "${GALERA_STATE:-}.log"
    local state
    for state in "${MYSQL_LEVEL_STATE[@]}"; do
        # shellcheck disable=SC2086 # three words: directory, port, pid
        set -- $state
        MYSQL_DIR=$1 MYSQL_PORT=$2 MYSQL_PID=$3 stop_mariadb
    done
    stop_mariadb
    stop_postgres
    end_section
    echo "=== total: $(elapsed "$SCRIPT_START")$(cpu_since "$SCRIPT_CPU") on $(nproc) cores, exit status $rc"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- MySQL isolation levels to cover ------------------------------------------------------------
IFS=',' read -r -a ISOLATION_LEVELS <<<"${DIESEL_LEASE_TEST_ISOLATION:-repeatable-read,read-committed}"
isolation_sql() { # repeatable-read -> REPEATABLE READ
    case "$1" in
    repeatable-read | read-committed | read-uncommitted | serializable)
        echo "$1" | tr 'a-z-' 'A-Z '
        ;;
    *)
        echo "unknown isolation level '$1' in DIESEL_LEASE_TEST_ISOLATION (expected repeatable-read, read-committed, read-uncommitted or serializable)" >&2
        return 1
        ;;
    esac
}
for level in "${ISOLATION_LEVELS[@]}"; do isolation_sql "$level" >/dev/null; done

# --- servers ----------------------------------------------------------------------------------
REQUIRE=(postgres sqlite)

section "Starting PostgreSQL 15"
start_postgres
export DIESEL_LEASE_TEST_PG=$PG_URL
echo "DIESEL_LEASE_TEST_PG=$DIESEL_LEASE_TEST_PG"

section "Starting MariaDB"
MYSQL_SKIP_REASON=
# shellcheck disable=SC2119 # no extra mariadbd options: the server default isolation level
if ! ensure_mariadb_installed || ! start_mariadb; then
    MYSQL_SKIP_REASON=$SERVERS_ERROR
    stop_mariadb
fi

unset DIESEL_LEASE_TEST_MYSQL
if [ -z "$MYSQL_SKIP_REASON" ]; then
    export DIESEL_LEASE_TEST_MYSQL=$MYSQL_URL
    # `mariadb`: the same server through Diesel's MariadbConnection (`…::mariadb::…` tests).
    REQUIRE+=(mysql mariadb)
    echo "DIESEL_LEASE_TEST_MYSQL=$DIESEL_LEASE_TEST_MYSQL ($(mariadb_sql 'SELECT VERSION()'))"
elif [ "${CI:-}" = "true" ]; then
    loud "MySQL tests cannot run on CI: $MYSQL_SKIP_REASON"
    exit 1
else
    loud "MySQL tests SKIPPED: $MYSQL_SKIP_REASON"
fi

# The further isolation levels (READ COMMITTED by default) each get a MariaDB server of their
# own, started with that level, so that their pass runs beside the full one instead of after it.
MYSQL_LEVEL_URLS=()
if [ -n "${DIESEL_LEASE_TEST_MYSQL:-}" ]; then
    saved_mysql=("$MYSQL_DIR" "$MYSQL_PORT" "$MYSQL_PID" "$MYSQL_URL")
    for level in "${ISOLATION_LEVELS[@]:1}"; do
        section "Starting MariaDB at $level"
        sql=$(isolation_sql "$level")
        if ! start_mariadb --transaction-isolation="${sql// /-}"; then
            loud "MariaDB at $level did not start: $SERVERS_ERROR"
            stop_mariadb
            exit 1
        fi
        MYSQL_LEVEL_URLS+=("$MYSQL_URL")
        MYSQL_LEVEL_STATE+=("$MYSQL_DIR $MYSQL_PORT $MYSQL_PID")
        echo "$level: $MYSQL_URL ($(mariadb_sql 'SELECT @@GLOBAL.tx_isolation'))"
    done
    MYSQL_DIR=${saved_mysql[0]} MYSQL_PORT=${saved_mysql[1]} MYSQL_PID=${saved_mysql[2]} MYSQL_URL=${saved_mysql[3]}
fi

section "Starting PgBouncer (transaction pooling)"
unset DIESEL_LEASE_TEST_PGBOUNCER
PGBOUNCER_SKIP_REASON=
if ensure_pgbouncer_installed && start_pgbouncer; then
    export DIESEL_LEASE_TEST_PGBOUNCER=$PGBOUNCER_URL
    REQUIRE+=(pgbouncer)
    echo "DIESEL_LEASE_TEST_PGBOUNCER=$DIESEL_LEASE_TEST_PGBOUNCER ($("$(pgbouncer_bin)" --version | head -1))"
elif [ "${CI:-}" = "true" ]; then
    loud "PgBouncer tests cannot run on CI: $SERVERS_ERROR"
    exit 1
else
    PGBOUNCER_SKIP_REASON=$SERVERS_ERROR
    loud "PgBouncer tests SKIPPED: $PGBOUNCER_SKIP_REASON"
    stop_pgbouncer
fi

# Headless Chromium for the browser test of `diesel-lease serve` (cli/tests/serve.rs): Debian's
# chromium and chromium-driver, installed when missing. Without them the test is SKIPPED, loudly;
# under CI that is a failure, and `chromium` in DIESEL_LEASE_TEST_REQUIRE makes the test fail too.
section "Chromium (the operator page's browser test)"
CHROMIUM_SKIP_REASON=
if { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; } ||
    apt_install "chromium or chromedriver" chromium chromium-driver; then
    REQUIRE+=(chromium)
    echo "$(/usr/bin/chromium --version 2>/dev/null | head -1), $(/usr/bin/chromedriver --version | head -1)"
elif [ "${CI:-}" = "true" ]; then
    loud "The browser test cannot run on CI: $SERVERS_ERROR"
    exit 1
else
    CHROMIUM_SKIP_REASON=$SERVERS_ERROR
    loud "The browser test SKIPPED: $CHROMIUM_SKIP_REASON"
fi

# MariaDB Galera (tests/faults/galera.rs): a three-node cluster, started in the background (about
# 30-45 s, mostly state transfers) while the build runs; galera_ready waits for it before the
# tests and exports DIESEL_LEASE_TEST_GALERA (the three nodes' admin URLs, comma-separated).
# Without the Galera library the Galera tests are SKIPPED; under CI that is a failure.
GALERA_STATE=$(mktemp "${TMPDIR:-/tmp}/diesel-lease-galera.XXXXXX")
GALERA_JOB=
if galera_available 2>/dev/null; then
    section "Starting MariaDB Galera (3 nodes, in the background)"
    (
        rc=0
        start_galera >"$GALERA_STATE.log" 2>&1 || rc=$?
        {
            declare -p GALERA_DIRS GALERA_PORTS
            printf 'GALERA_URLS=%q\nGALERA_RC=%q\nGALERA_ERROR=%q\n' "$GALERA_URLS" "$rc" "$SERVERS_ERROR"
        } >"$GALERA_STATE"
    ) &
    GALERA_JOB=$!
fi
# Waits for the background start; exports DIESEL_LEASE_TEST_GALERA and adds `galera` to
# REQUIRE when the cluster is up. Returns non-zero only when CI must fail.
galera_ready() {
    unset DIESEL_LEASE_TEST_GALERA
    local reason
    if [ -z "$GALERA_JOB" ]; then
        galera_available 2>/dev/null || true
        reason=$SERVERS_ERROR
    else
        wait "$GALERA_JOB" || true
        GALERA_JOB=
        # shellcheck disable=SC1090
        source "$GALERA_STATE"
        reason=${GALERA_ERROR:-}
        [ "${GALERA_RC:-1}" -eq 0 ] || reason=${reason:-start_galera failed}
    fi
    if [ -z "$reason" ]; then
        export DIESEL_LEASE_TEST_GALERA=$GALERA_URLS
        REQUIRE+=(galera)
        echo "DIESEL_LEASE_TEST_GALERA=$DIESEL_LEASE_TEST_GALERA"
    elif [ "${CI:-}" = "true" ]; then
        [ -f "$GALERA_STATE.log" ] && cat "$GALERA_STATE.log"
        loud "Galera tests cannot run on CI: $reason"
        return 1
    else
        loud "Galera tests SKIPPED: $reason"
    fi
    DIESEL_LEASE_TEST_REQUIRE=$(
        IFS=,
        echo "${REQUIRE[*]}"
    )
}

# PostgreSQL failover (tests/faults/failover.rs): the tests start their own primary + standby
# pairs through this script, with the same PostgreSQL binaries.
export DIESEL_LEASE_TEST_PG_PAIR=$PWD/scripts/pg-pair.sh
REQUIRE+=(pg-pair)

export DIESEL_LEASE_TEST_REQUIRE
DIESEL_LEASE_TEST_REQUIRE=$(
    IFS=,
    echo "${REQUIRE[*]}"
)
echo "DIESEL_LEASE_TEST_REQUIRE=$DIESEL_LEASE_TEST_REQUIRE"

# Switches the MySQL server's isolation level for new connections and checks that a new session
# really gets it (the check keeps a typo from running the "wrong" matrix silently).
set_mysql_isolation() {
    local sql got
    sql=$(isolation_sql "$1")
    mariadb_sql "SET GLOBAL TRANSACTION ISOLATION LEVEL $sql"
    got=$(mariadb_sql "SELECT @@SESSION.tx_isolation")
    if [ "$got" != "${sql// /-}" ]; then
        echo "MariaDB isolation level is '$got', expected '${sql// /-}'" >&2
        return 1
    fi
    echo "MariaDB isolation level for new connections: $got"
}

# --- the test passes ------------------------------------------------------------------------------
STATUS=0
SUMMARY=()
# Every pass runs every test target (`--no-fail-fast`: one failing target must not hide the
# others), and its output is kept so that the summary can name each failing test.
PASS_LOGS=$(mktemp -d "${TMPDIR:-/tmp}/diesel-lease-test-logs.XXXXXX")
FAILED_TESTS=()
failed_tests_of() { # the names of the failing tests in a pass's log, one per line
    {
        sed -nE 's/^test (.+) \.\.\. FAILED$/\1/p' "$1"
        # cargo-nextest: `FAIL [ 1.2s] (3/9) <binary> <test>`, also TIMEOUT, SIGSEGV, ...
        sed -nE 's/^ *(FAIL|TIMEOUT|SIG[A-Z]+|ABORT|LEAK-FAIL) +\[[^]]*\]( \([^)]*\))? +(.+)$/\3/p' "$1"
        grep -E '^error: could not compile' "$1" || true
    } | awk '!seen[$0]++'
}

# The suite runs the examples' binaries (tests/examples.rs), which `cargo test` does not build:
# build every binary first, with the test targets, so that features unify exactly as in the
# test pass and nothing is compiled twice. A failure here shows again as the test pass's
# compile error; it is in the summary either way.
section "build (the examples' binaries too)"
pass_start=$(now)
rc=0
cargo build --workspace --all-features --bins --tests "${CARGO_ARGS[@]}" 2>&1 |
    tee "$PASS_LOGS/build.log" || rc=$?
SUMMARY+=("build: $([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)"), $(elapsed "$pass_start")")
# Everything after the build (the issue-53 budget: ten minutes on two cores), with its CPU.
AFTER_BUILD_START=$(now)
AFTER_BUILD_CPU=$(cpu_busy)
while IFS= read -r t; do FAILED_TESTS+=("$t (build)"); done < <(failed_tests_of "$PASS_LOGS/build.log")
[ "$STATUS" -ne 0 ] || STATUS=$rc

section "MariaDB Galera"
galera_ready
echo "DIESEL_LEASE_TEST_REQUIRE=$DIESEL_LEASE_TEST_REQUIRE"

FIRST_LEVEL=${ISOLATION_LEVELS[0]}
# cargo-nextest runs the tests: each in a process of its own, many at once (.config/nextest.toml
# says how many, and which must not overlap). Installed from the registry when missing.
if ! cargo nextest --version >/dev/null 2>&1; then
    section "Installing cargo-nextest"
    cargo install --locked cargo-nextest
fi
NEXTEST=(cargo nextest run --workspace --all-features --no-fail-fast --no-tests=warn)

# The full pass, and beside it the MySQL-family tests on each further isolation level's own
# server: one nextest run each, at the same time (the tests wait far more than they compute).
if [ -n "${DIESEL_LEASE_TEST_MYSQL:-}" ]; then
    PASS="full suite (MySQL at $FIRST_LEVEL)"
    set_mysql_isolation "$FIRST_LEVEL"
else
    PASS="full suite (without MySQL)"
fi
section "test passes: $PASS${MYSQL_LEVEL_URLS:+, and the MySQL-family tests at ${ISOLATION_LEVELS[*]:1}}"
PASS_LABELS=("$PASS")
PASS_FILES=(full)
PASS_PROFILES=(default)
# Without a filter from the caller, `mysql::` and `mariadb::` select the MySQL-family instances
# of every suite test (MysqlConnection and MariadbConnection); with one,
# DIESEL_LEASE_TEST_BACKENDS skips the other backends' matches.
MYSQL_TEST_ARGS=("${TEST_ARGS[@]}")
[ ${#MYSQL_TEST_ARGS[@]} -gt 0 ] || MYSQL_TEST_ARGS=(mysql:: mariadb::)
passes_start=$(now)
PASS_PIDS=()
# The public API against its committed snapshot (scripts/public-api.sh: cargo-public-api, installed
# from the registry into target/tools), then dependencies resolved afresh (scripts/resolve.sh): the
# newest versions the requirements allow, the oldest (every direct dependency of the published
# crates at its declared minimum), and a new application outside the workspace. Full runs only (no CARGO_ARGS or TEST_ARGS), unless
# DIESEL_LEASE_TEST_RESOLVE names the passes (comma-separated; empty skips them). They build
# cold copies in target/resolve/ (the oldest about nine minutes on two cores by itself), so
# they run one after another in the background, beside the test passes, whose tests mostly
# wait; their logs are printed after the doctests.
if [ ${#CARGO_ARGS[@]} -eq 0 ] && [ ${#TEST_ARGS[@]} -eq 0 ]; then
    RESOLVE_DEFAULT=public-api,newest,oldest,new-app
else
    RESOLVE_DEFAULT=
fi
IFS=',' read -r -a RESOLVE_PASSES <<<"${DIESEL_LEASE_TEST_RESOLVE-$RESOLVE_DEFAULT}"
if [ ${#RESOLVE_PASSES[@]} -gt 0 ]; then
    (
        for mode in "${RESOLVE_PASSES[@]}"; do
            started=$(now)
            rc=0
            case "$mode" in
            # The public API against its committed snapshot (scripts/public-api.sh).
            public-api) bash scripts/public-api.sh >"$PASS_LOGS/resolve-$mode.log" 2>&1 </dev/null || rc=$? ;;
            *) bash scripts/resolve.sh "$mode" >"$PASS_LOGS/resolve-$mode.log" 2>&1 </dev/null || rc=$? ;;
            esac
            echo "$rc $started $(now)" >"$PASS_LOGS/resolve-$mode.status"
        done
    ) &
    RESOLVE_PID=$!
fi
# Each pass writes the time it ended to <log>.end, so that the summary gives each its own time
# although they are waited for one after another.
(
    rc=0
    DIESEL_LEASE_TEST_ISOLATION=$FIRST_LEVEL \
        "${NEXTEST[@]}" "${CARGO_ARGS[@]}" -- "${TEST_ARGS[@]}" >"$PASS_LOGS/full.log" 2>&1 || rc=$?
    now >"$PASS_LOGS/full.end"
    exit $rc
) &
PASS_PIDS+=($!)
i=0
for level in "${ISOLATION_LEVELS[@]:1}"; do
    [ -n "${MYSQL_LEVEL_URLS[$i]:-}" ] || break
    PASS_LABELS+=("MySQL-family tests at $level")
    PASS_FILES+=("$level")
    PASS_PROFILES+=("level-$((i + 1))")
    (
        # Let the full pass take cargo's build lock first: both find everything built.
        sleep 2
        rc=0
        DIESEL_LEASE_TEST_ISOLATION=$level DIESEL_LEASE_TEST_MYSQL=${MYSQL_LEVEL_URLS[$i]} \
            DIESEL_LEASE_TEST_BACKENDS=mysql,mariadb DIESEL_LEASE_TEST_REQUIRE=mysql,mariadb \
            "${NEXTEST[@]}" --profile "level-$((i + 1))" "${CARGO_ARGS[@]}" -- "${MYSQL_TEST_ARGS[@]}" \
            >"$PASS_LOGS/$level.log" 2>&1 || rc=$?
        now >"$PASS_LOGS/$level.end"
        exit $rc
    ) &
    PASS_PIDS+=($!)
    i=$((i + 1))
done
for n in "${!PASS_PIDS[@]}"; do
    rc=0
    wait "${PASS_PIDS[$n]}" || rc=$?
    cat "$PASS_LOGS/${PASS_FILES[$n]}.log"
    ended=$(cat "$PASS_LOGS/${PASS_FILES[$n]}.end" 2>/dev/null || now)
    SUMMARY+=("${PASS_LABELS[$n]}: $([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)"), $(elapsed "$passes_start" "$ended")")
    while IFS= read -r t; do FAILED_TESTS+=("$t (${PASS_LABELS[$n]})"); done < <(failed_tests_of "$PASS_LOGS/${PASS_FILES[$n]}.log")
    [ "$STATUS" -ne 0 ] || STATUS=$rc
    junit=target/nextest/${PASS_PROFILES[$n]}/junit.xml
    [ -f "$junit" ] && cp "$junit" "$PASS_LOGS/${PASS_FILES[$n]}.xml"
done

# Doctests (nextest does not run them): the library crates' examples, compiled and run.
section "doctests"
pass_start=$(now)
rc=0
cargo test --workspace --all-features --doc "${CARGO_ARGS[@]}" -- "${TEST_ARGS[@]}" 2>&1 |
    tee "$PASS_LOGS/doc.log" || rc=$?
SUMMARY+=("doctests: $([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)"), $(elapsed "$pass_start")")
while IFS= read -r t; do FAILED_TESTS+=("$t (doctests)"); done < <(failed_tests_of "$PASS_LOGS/doc.log")
[ "$STATUS" -ne 0 ] || STATUS=$rc

# The dependency checks started beside the test passes: their logs, times and failing tests.
if [ -n "$RESOLVE_PID" ]; then
    section "the public API and dependencies resolved afresh (${RESOLVE_PASSES[*]}, run beside the test passes)"
    wait "$RESOLVE_PID" || true
    RESOLVE_PID=
    for mode in "${RESOLVE_PASSES[@]}"; do
        echo "--- $mode"
        cat "$PASS_LOGS/resolve-$mode.log" 2>/dev/null || true
        # "status start end", written when the pass ended; missing if it never ran
        rc=
        [ ! -f "$PASS_LOGS/resolve-$mode.status" ] || read -r rc started ended <"$PASS_LOGS/resolve-$mode.status"
        if [ -z "$rc" ]; then
            rc=1
            SUMMARY+=("$mode: FAILED (did not run)")
        else
            SUMMARY+=("$mode: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED ($rc)"), $(elapsed "$started" "$ended")")
        fi
        while IFS= read -r t; do FAILED_TESTS+=("$t ($mode)"); done < <(failed_tests_of "$PASS_LOGS/resolve-$mode.log")
        [ "$STATUS" -ne 0 ] || STATUS=$rc
    done
fi

SUMMARY+=("everything after the build: $(elapsed "$AFTER_BUILD_START")$(cpu_since "$AFTER_BUILD_CPU") on $(nproc) cores")
section "Summary"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
reports=()
for n in "${!PASS_FILES[@]}"; do
    [ -f "$PASS_LOGS/${PASS_FILES[$n]}.xml" ] && reports+=("${PASS_FILES[$n]}=$PASS_LOGS/${PASS_FILES[$n]}.xml")
done
[ ${#reports[@]} -eq 0 ] || python3 scripts/test-summary.py "${reports[@]}" || true
if [ -n "$MYSQL_SKIP_REASON" ]; then
    echo "  MySQL tests SKIPPED: $MYSQL_SKIP_REASON"
fi
if [ -n "$PGBOUNCER_SKIP_REASON" ]; then
    echo "  PgBouncer tests SKIPPED: $PGBOUNCER_SKIP_REASON"
fi
if [ -n "$CHROMIUM_SKIP_REASON" ]; then
    echo "  The browser test SKIPPED: $CHROMIUM_SKIP_REASON"
fi
if [ ${#FAILED_TESTS[@]} -gt 0 ]; then
    echo
    echo "Failing tests (${#FAILED_TESTS[@]}):"
    for t in "${FAILED_TESTS[@]}"; do echo "  $t"; done
fi
rm -rf "$PASS_LOGS"
exit "$STATUS"
