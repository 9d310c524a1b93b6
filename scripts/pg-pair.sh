#!/usr/bin/env bash
# A throwaway PostgreSQL 15 primary with a streaming standby, for the failover tests
# (tests/faults/failover.rs), which drive it through these sub-commands:
#
#   pg-pair.sh start sync|async   # prints DIR=… PRIMARY_PORT=… STANDBY_PORT=… (one per line)
#   pg-pair.sh pause-wal DIR      # SIGSTOP the primary's WAL sender: no more WAL leaves it
#   pg-pair.sh resume-wal DIR     # SIGCONT it
#   pg-pair.sh crash-primary DIR  # kill -9 the primary's postmaster and every backend: a crash
#   pg-pair.sh promote DIR        # promote the standby (pg_ctl promote -w)
#   pg-pair.sh stop DIR           # stop whatever runs and delete DIR
#
# `sync` sets synchronous_standby_names to the standby with synchronous_commit = on: a commit is
# acknowledged only once the standby has flushed it. `async` leaves replication asynchronous
# (PostgreSQL's default). Both servers listen on free ports of 127.0.0.1 with trust auth;
# clients use a multi-host URL (`host=127.0.0.1:P,127.0.0.1:S`, target_session_attrs=read-write).
# fsync stays on here (unlike the suite's single server): a crash must lose only what
# replication did not carry.

set -euo pipefail
# shellcheck source=scripts/servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"

pg() { as_user postgres "$PG_BIN_DIR/$1" "${@:2}"; }

start_server() { # DATA PORT LOG
    pg pg_ctl -D "$1" -l "$3" -w -t 60 -o "-p $2 -k $(dirname "$1") -c listen_addresses=127.0.0.1" \
        start >/dev/null
}

postmaster_pid() { head -n 1 "$1/postmaster.pid" 2>/dev/null || true; }

cmd=${1:?usage: pg-pair.sh start sync|async | pause-wal|resume-wal|crash-primary|promote|stop DIR}
case "$cmd" in
start)
    mode=${2:?start sync|async}
    dir=$(server_dir postgres)
    primary_port=$(free_port)
    standby_port=$(free_port)
    pg initdb -D "$dir/primary" -U postgres --auth=trust --encoding=UTF8 --locale=C \
        >"$dir/initdb.log" 2>&1
    {
        echo "wal_level = replica"
        echo "max_wal_senders = 4"
        echo "max_connections = 100"
        echo "wal_sender_timeout = 5s"
        if [ "$mode" = sync ]; then
            echo "synchronous_standby_names = 'standby1'"
            echo "synchronous_commit = on"
        fi
    } >>"$dir/primary/postgresql.conf"
    echo "host replication postgres 127.0.0.1/32 trust" >>"$dir/primary/pg_hba.conf"
    start_server "$dir/primary" "$primary_port" "$dir/primary.log"
    pg pg_basebackup -h 127.0.0.1 -p "$primary_port" -U postgres -D "$dir/standby" \
        -X stream -R >"$dir/basebackup.log" 2>&1
    # The standby names itself so the primary's synchronous_standby_names matches it (after
    # the primary_conninfo that pg_basebackup -R wrote: the last setting wins).
    {
        echo "primary_conninfo = 'host=127.0.0.1 port=$primary_port user=postgres application_name=standby1'"
        echo "wal_receiver_timeout = 5s"
        # The synchronous_standby_names copied from the primary must not make the standby wait
        # for itself once promoted: a promoted standby runs alone.
        echo "synchronous_standby_names = ''"
    } >>"$dir/standby/postgresql.auto.conf"
    start_server "$dir/standby" "$standby_port" "$dir/standby.log"
    # Wait until the standby streams (and, in sync mode, is the synchronous one).
    want=streaming
    for _ in $(seq 1 300); do
        state=$(pg psql -h 127.0.0.1 -p "$primary_port" -U postgres -d postgres -Atc \
            "SELECT state || '/' || sync_state FROM pg_stat_replication WHERE application_name = 'standby1'" || true)
        if [ "$mode" = sync ] && [ "$state" = "$want/sync" ]; then break; fi
        if [ "$mode" = async ] && [ "${state%%/*}" = "$want" ]; then break; fi
        sleep 0.1
    done
    if [ "${state%%/*}" != "$want" ]; then
        echo "the standby did not start streaming (state '$state'); logs in $dir" >&2
        exit 1
    fi
    echo "DIR=$dir"
    echo "PRIMARY_PORT=$primary_port"
    echo "STANDBY_PORT=$standby_port"
    ;;
pause-wal | resume-wal)
    # The sender, not the standby's receiver: WAL already written to the socket would still reach
    # a paused receiver when it resumes, and the point is that nothing more leaves the primary.
    dir=${2:?DIR}
    primary=$(postmaster_pid "$dir/primary")
    sender=$(pgrep -P "$primary" -f 'walsender' || true)
    if [ -z "$sender" ]; then
        echo "no WAL sender under the primary's postmaster $primary" >&2
        exit 1
    fi
    if [ "$cmd" = pause-wal ]; then kill -STOP "$sender"; else kill -CONT "$sender"; fi
    ;;
crash-primary)
    dir=${2:?DIR}
    primary=$(postmaster_pid "$dir/primary")
    # The postmaster and all its children at once, as a machine that loses power.
    children=$(pgrep -P "$primary" || true)
    # shellcheck disable=SC2086
    kill -9 "$primary" $children 2>/dev/null || true
    ;;
promote)
    dir=${2:?DIR}
    pg pg_ctl -D "$dir/standby" -w -t 60 promote >/dev/null
    ;;
stop)
    dir=${2:?DIR}
    for node in primary standby; do
        pid=$(postmaster_pid "$dir/$node")
        if [ -n "$pid" ]; then
            # A paused WAL sender would never see the stop.
            pkill -CONT -P "$pid" 2>/dev/null || true
            pg pg_ctl -D "$dir/$node" -m immediate -w stop >/dev/null 2>&1 || true
        fi
    done
    rm -rf "$dir"
    ;;
*)
    echo "unknown command $cmd" >&2
    exit 2
    ;;
esac
