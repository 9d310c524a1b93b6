# shellcheck shell=bash
# The variables this file sets (PG_URL, MYSQL_URL, SERVERS_ERROR, ...) are for the caller.
# shellcheck disable=SC2034
# Throwaway database servers for the test suite and the benchmarks.
#
# Source this file (it defines functions only and changes no shell options), then:
#
#   start_postgres            # sets PG_URL, PG_PORT, PG_DIR
#   stop_postgres             # stops it and deletes PG_DIR; safe to call twice or when never started
#   ensure_mariadb_installed  # installs MariaDB from Debian's packages when mariadbd is missing
#   start_mariadb [ARGS...]   # sets MYSQL_URL, MYSQL_PORT, MYSQL_DIR; ARGS go to mariadbd
#                             # ($MARIADBD overrides the server binary)
#   mariadb_sql "SQL"         # runs SQL on that server as root
#   stop_mariadb
#   ensure_pgbouncer_installed  # installs PgBouncer from Debian's packages when it is missing
#   start_pgbouncer           # after start_postgres: sets PGBOUNCER_URL, PGBOUNCER_PORT,
#                             # PGBOUNCER_DIR (transaction pooling in front of that PostgreSQL)
#   stop_pgbouncer
#
# Every server lives in its own `mktemp -d` directory (data, unix socket, log), listens on a free
# TCP port of 127.0.0.1 only, and is tuned for tests: no fsync, so a crash of the machine may lose
# data, which a throwaway server does not care about. Functions return non-zero with a message on
# stderr instead of exiting (and leave that one-line reason in SERVERS_ERROR), so callers decide
# what a failure means. They never touch servers they
# did not start (a developer's own PostgreSQL on another port keeps running).

PG_BIN_DIR=${PG_BIN_DIR:-/usr/lib/postgresql/15/bin}
SERVERS_ERROR=

# Records why a server function failed and says it on stderr; the caller then returns 1.
server_error() {
    SERVERS_ERROR=$1
    echo "$1" >&2
}

# Runs a command as a system user when we are root (PostgreSQL and MariaDB refuse to run as root,
# or should not), and as ourselves otherwise: a non-root developer owns the temp dirs anyway.
as_user() {
    local user=$1
    shift
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u "$user" -- "$@"
    else
        "$@"
    fi
}

# Prints a TCP port of 127.0.0.1 that nothing listens on. The kernel picks it (bind to port 0);
# without python3 we probe random ports. Another process could take it before the server binds,
# so the start functions report a failed start clearly rather than hanging.
free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
        return
    fi
    local port
    for _ in $(seq 1 100); do
        port=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
    server_error "free_port: no free TCP port found on 127.0.0.1"
    return 1
}

# A fresh temp dir owned by `user` (the server writes its data, socket and log there).
server_dir() {
    local user=$1 dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/diesel-lease-$user.XXXXXX")
    if [ "$(id -u)" -eq 0 ]; then
        chown "$user": "$dir"
    fi
    echo "$dir"
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL 15
# ---------------------------------------------------------------------------------------------

start_postgres() {
    if [ ! -x "$PG_BIN_DIR/initdb" ]; then
        server_error "start_postgres: $PG_BIN_DIR/initdb not found (install postgresql-15 or set PG_BIN_DIR)"
        return 1
    fi
    if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
        server_error "start_postgres: running as root but the 'postgres' system user does not exist"
        return 1
    fi
    PG_DIR=$(server_dir postgres) || return 1
    PG_PORT=$(free_port) || return 1
    # --no-sync and trust auth: a throwaway cluster that only this machine's tests reach.
    if ! as_user postgres "$PG_BIN_DIR/initdb" -D "$PG_DIR/data" -U postgres --auth=trust \
        --encoding=UTF8 --locale=C --no-sync >"$PG_DIR/initdb.log" 2>&1; then
        cat "$PG_DIR/initdb.log" >&2
        server_error "start_postgres: initdb failed (its output is above)"
        return 1
    fi
    # max_connections: the contention tests open many pooled connections plus worker processes,
    # and several tests run in parallel.
    if ! as_user postgres "$PG_BIN_DIR/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
        -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
        start >/dev/null; then
        cat "$PG_DIR/server.log" >&2
        server_error "start_postgres: the server did not start on 127.0.0.1:$PG_PORT (its log is above)"
        return 1
    fi
    PG_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
}

stop_postgres() {
    if [ -n "${PG_DIR:-}" ] && [ -d "$PG_DIR" ]; then
        # Immediate mode: nothing in a throwaway cluster is worth a checkpoint.
        if [ -f "$PG_DIR/data/postmaster.pid" ]; then
            as_user postgres "$PG_BIN_DIR/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
        fi
        rm -rf "$PG_DIR"
    fi
    PG_DIR=
}

# ---------------------------------------------------------------------------------------------
# MariaDB
# ---------------------------------------------------------------------------------------------

# The server binary: $MARIADBD when set (another build or install), else mariadbd from PATH or
# /usr/sbin (which a non-root PATH may lack).
mariadbd_bin() {
    if [ -n "${MARIADBD:-}" ]; then
        echo "$MARIADBD"
    else
        command -v mariadbd 2>/dev/null || echo /usr/sbin/mariadbd
    fi
}

# Installs MariaDB from the distribution's packages when the server (mariadb-server) or the
# client library the Rust build links (libmariadb-dev, through Diesel's `mysql` feature) is
# missing. Root installs directly (the CI machine); others try password-less sudo. Fails with
# the reason on stderr.
ensure_mariadb_installed() {
    if [ -x "$(mariadbd_bin)" ] && command -v mariadb_config >/dev/null 2>&1; then
        return 0
    fi
    apt_install "mariadbd or libmariadb-dev" mariadb-server libmariadb-dev || return 1
    if [ ! -x "$(mariadbd_bin)" ]; then
        server_error "apt-get installed mariadb-server but $(mariadbd_bin) is still missing"
        return 1
    fi
}

# Installs Debian packages PACKAGES for WHAT is missing: directly as root (the CI machine), else
# with password-less sudo. Fails with the reason on stderr.
apt_install() {
    local what=$1
    shift
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            server_error "$what is not installed, and we are neither root nor allowed password-less sudo to install it (apt-get install $*)"
            return 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        server_error "$what is not installed, and apt-get is not available to install it"
        return 1
    fi
    echo "$what not found: installing $* with apt-get" >&2
    if ! "${sudo[@]}" apt-get update -q >&2 ||
        ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2; then
        server_error "'apt-get install $*' failed (output above)"
        return 1
    fi
}

start_mariadb() {
    if ! command -v mariadb-install-db >/dev/null 2>&1; then
        server_error "start_mariadb: mariadb-install-db not found"
        return 1
    fi
    # The server runs as the `mysql` system user when we are root (mariadbd refuses root unless
    # told otherwise, and should not write files as root).
    local user=mysql
    if [ "$(id -u)" -ne 0 ]; then
        user=$(id -un)
    elif ! id mysql >/dev/null 2>&1; then
        server_error "start_mariadb: running as root but the 'mysql' system user does not exist"
        return 1
    fi
    MYSQL_DIR=$(server_dir "$user") || return 1
    MYSQL_PORT=$(free_port) || return 1
    # The tests connect as root over TCP from 127.0.0.1. mariadb-install-db only creates
    # root@localhost; with --skip-name-resolve a TCP client is matched by IP, so this file (run at
    # every start with full privileges, before clients are accepted) adds root@127.0.0.1 without
    # a password. The server listens on 127.0.0.1 only.
    cat >"$MYSQL_DIR/init.sql" <<'SQL' || return 1
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
SQL
    # A temporary directory of its own, for the bootstrap (mariadb-install-db passes the option on
    # to its mariadbd) and the server: a MariaDB server deletes every `#sql*` file in its tmpdir
    # when it starts, so servers sharing /tmp (a Galera node restarted by a test, another suite on
    # the machine) would delete each other's live temporary tables.
    mkdir -p "$MYSQL_DIR/tmp" || return 1
    if [ "$(id -u)" -eq 0 ]; then
        chown "$user": "$MYSQL_DIR/init.sql" "$MYSQL_DIR/tmp"
    fi
    # --no-defaults: ignore /etc/mysql/*.cnf so the machine's configuration cannot change the test
    # server. 'normal' root authentication: root@localhost has no password (no unix_socket plugin,
    # so any OS user can use the client over the socket).
    local install_user=()
    [ "$(id -u)" -eq 0 ] && install_user=(--user=mysql)
    if ! as_user "$user" mariadb-install-db --no-defaults --datadir="$MYSQL_DIR/data" \
        --tmpdir="$MYSQL_DIR/tmp" "${install_user[@]}" --auth-root-authentication-method=normal --skip-test-db \
        --skip-name-resolve >"$MYSQL_DIR/install.log" 2>&1; then
        cat "$MYSQL_DIR/install.log" >&2
        server_error "start_mariadb: mariadb-install-db failed (its output is above)"
        return 1
    fi
    # Test tuning: no flush at commit, no doublewrite, a small buffer pool, no performance schema
    # (memory), a shutdown that skips flushing (the data is deleted right after), room for many
    # connections (pools + worker processes + parallel tests), utf8mb4.
    # The isolation level is the server default (REPEATABLE READ) unless ARGS say otherwise.
    as_user "$user" "$(mariadbd_bin)" --no-defaults \
        --datadir="$MYSQL_DIR/data" \
        --tmpdir="$MYSQL_DIR/tmp" \
        --socket="$MYSQL_DIR/mysqld.sock" \
        --pid-file="$MYSQL_DIR/mysqld.pid" \
        --log-error="$MYSQL_DIR/server.log" \
        --port="$MYSQL_PORT" \
        --bind-address=127.0.0.1 \
        --skip-name-resolve \
        --init-file="$MYSQL_DIR/init.sql" \
        --max-connections=300 \
        --innodb-flush-log-at-trx-commit=0 \
        --innodb-doublewrite=0 \
        --innodb-buffer-pool-size=128M \
        --performance-schema=OFF \
        --innodb-fast-shutdown=2 \
        --character-set-server=utf8mb4 \
        --collation-server=utf8mb4_unicode_ci \
        "$@" >/dev/null 2>&1 &
    MYSQL_PID=$!
    MYSQL_URL="mysql://root@127.0.0.1:$MYSQL_PORT/mysql"
    # Ready means: root@127.0.0.1 can run a query over TCP, exactly as the tests will connect.
    for _ in $(seq 1 120); do
        if mariadb_sql "SELECT 1" >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$MYSQL_PID" 2>/dev/null; then
            break
        fi
        sleep 0.5
    done
    if [ -f "$MYSQL_DIR/server.log" ]; then cat "$MYSQL_DIR/server.log" >&2; fi
    server_error "start_mariadb: the server did not answer on 127.0.0.1:$MYSQL_PORT (its log is above)"
    return 1
}

# Runs SQL on the throwaway MariaDB as root@127.0.0.1 over TCP; prints rows tab-separated.
mariadb_sql() {
    mariadb --no-defaults --protocol=TCP -h 127.0.0.1 -P "$MYSQL_PORT" -u root \
        --batch --skip-column-names -e "$1"
}

stop_mariadb() {
    # Signal mariadbd itself (from its pid file), not the runuser wrapper we started: runuser
    # would pass SIGTERM on but then SIGKILL the server after two seconds. SIGTERM is mariadbd's
    # clean shutdown; SIGKILL is only for a server that hangs.
    local pid=
    if [ -n "${MYSQL_DIR:-}" ] && [ -s "$MYSQL_DIR/mysqld.pid" ]; then
        pid=$(cat "$MYSQL_DIR/mysqld.pid")
    fi
    pid=${pid:-${MYSQL_PID:-}}
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    if [ -n "${MYSQL_PID:-}" ]; then
        kill "$MYSQL_PID" 2>/dev/null || true
        wait "$MYSQL_PID" 2>/dev/null || true
    fi
    MYSQL_PID=
    if [ -n "${MYSQL_DIR:-}" ] && [ -d "$MYSQL_DIR" ]; then
        rm -rf "$MYSQL_DIR"
    fi
    MYSQL_DIR=
}

# ---------------------------------------------------------------------------------------------
# PgBouncer, in transaction pooling mode, in front of the throwaway PostgreSQL
# ---------------------------------------------------------------------------------------------

# Installs PgBouncer from the distribution's packages when it is missing (root, or password-less
# sudo). Debian's package also enables a systemd service; nothing here uses it (policy-rc.d or
# the lack of systemd usually keeps it from starting, and it would listen on 6432, not on ours).
ensure_pgbouncer_installed() {
    if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
        return 0
    fi
    apt_install pgbouncer pgbouncer
}

pgbouncer_bin() {
    command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer
}

# Starts PgBouncer on a free port of 127.0.0.1, forwarding every database name to the PostgreSQL
# that start_postgres started (as user postgres, no password), in transaction pooling mode: each
# transaction of a client may run on another server connection, as in production set-ups that
# put PgBouncer in front of PostgreSQL. The pool per database is small (PGBOUNCER_POOL_SIZE,
# default 4 server connections), so clients really share server connections.
start_pgbouncer() {
    if [ -z "${PG_PORT:-}" ]; then
        server_error "start_pgbouncer: start_postgres first"
        return 1
    fi
    # PgBouncer refuses to run as root.
    local user=postgres
    [ "$(id -u)" -ne 0 ] && user=$(id -un)
    PGBOUNCER_DIR=$(server_dir "$user") || return 1
    PGBOUNCER_PORT=$(free_port) || return 1
    cat >"$PGBOUNCER_DIR/userlist.txt" <<'USERS' || return 1
"postgres" ""
USERS
    cat >"$PGBOUNCER_DIR/pgbouncer.ini" <<INI || return 1
[databases]
* = host=127.0.0.1 port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGBOUNCER_PORT
unix_socket_dir = $PGBOUNCER_DIR
auth_type = trust
auth_file = $PGBOUNCER_DIR/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = ${PGBOUNCER_POOL_SIZE:-4}
max_client_conn = 500
logfile = $PGBOUNCER_DIR/pgbouncer.log
pidfile = $PGBOUNCER_DIR/pgbouncer.pid
INI
    if [ "$(id -u)" -eq 0 ]; then
        chown "$user": "$PGBOUNCER_DIR"/*
    fi
    if ! as_user "$user" "$(pgbouncer_bin)" -d -q "$PGBOUNCER_DIR/pgbouncer.ini" >"$PGBOUNCER_DIR/start.log" 2>&1; then
        cat "$PGBOUNCER_DIR/start.log" "$PGBOUNCER_DIR/pgbouncer.log" >&2 2>/dev/null
        server_error "start_pgbouncer: pgbouncer did not start (its output is above)"
        return 1
    fi
    PGBOUNCER_URL="postgres://postgres@127.0.0.1:$PGBOUNCER_PORT/postgres"
    # Ready means: a query through it reaches PostgreSQL.
    for _ in $(seq 1 60); do
        if "$PG_BIN_DIR/psql" -X -q -t -A -d "$PGBOUNCER_URL" -c "SELECT 1" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.25
    done
    cat "$PGBOUNCER_DIR/pgbouncer.log" >&2 2>/dev/null
    server_error "start_pgbouncer: no answer through 127.0.0.1:$PGBOUNCER_PORT (its log is above)"
    return 1
}

stop_pgbouncer() {
    local pid=
    if [ -n "${PGBOUNCER_DIR:-}" ] && [ -s "$PGBOUNCER_DIR/pgbouncer.pid" ]; then
        pid=$(cat "$PGBOUNCER_DIR/pgbouncer.pid")
    fi
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        # SIGINT: close every connection and exit at once.
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    if [ -n "${PGBOUNCER_DIR:-}" ] && [ -d "$PGBOUNCER_DIR" ]; then
        rm -rf "$PGBOUNCER_DIR"
    fi
    PGBOUNCER_DIR=
}

# ---------------------------------------------------------------------------------------------
# MariaDB Galera: three nodes of one multi-primary cluster
# ---------------------------------------------------------------------------------------------
#
#   galera_available          # true when the Galera library and an SST method are installed
#   start_galera              # sets GALERA_URLS (comma-separated admin URLs, node 1 first),
#                             # GALERA_PORTS, GALERA_DIRS (arrays); every node Synced on return
#   galera_sql N "SQL"        # runs SQL on node N (1-3) as root
#   stop_galera               # stops every node and deletes its dir; safe to call twice
#
# Each node is a start_mariadb server (its own temp dir, data, log, free ports) with the wsrep
# options below. Node 1 bootstraps the cluster (--wsrep-new-cluster); nodes 2 and 3 join it one
# after the other and receive its state by SST (rsync, or mariabackup when rsync is missing).
# Each node's dir holds `restart.sh`, which starts that node again as a joiner: a test that
# kills a node with `kill -9` brings it back with it.

GALERA_PROVIDER=${GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}
GALERA_URLS=
GALERA_PORTS=()
GALERA_DIRS=()

# The state transfer method this machine can run, or nothing.
galera_sst_method() {
    if command -v rsync >/dev/null 2>&1 && command -v wsrep_sst_rsync >/dev/null 2>&1; then
        echo rsync
    elif command -v mariabackup >/dev/null 2>&1 && command -v wsrep_sst_mariabackup >/dev/null 2>&1; then
        echo mariabackup
    fi
}

galera_available() {
    if [ ! -f "$GALERA_PROVIDER" ]; then
        server_error "galera: $GALERA_PROVIDER not found (apt-get install galera-4, or set GALERA_PROVIDER)"
        return 1
    fi
    if [ -z "$(galera_sst_method)" ]; then
        server_error "galera: no state transfer method (install rsync or mariadb-backup)"
        return 1
    fi
}

galera_sql() {
    mariadb --no-defaults --protocol=TCP -h 127.0.0.1 -P "${GALERA_PORTS[$(($1 - 1))]}" -u root \
        --batch --skip-column-names -e "$2"
}

# Waits (up to 120 s) until node N says it is Synced with the cluster.
galera_wait_synced() {
    local state=
    for _ in $(seq 1 240); do
        state=$(galera_sql "$1" "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | cut -f2)
        if [ "$state" = "Synced" ]; then
            return 0
        fi
        sleep 0.5
    done
    server_error "start_galera: node $1 is '$state', not Synced, after 120 s (its log: ${GALERA_DIRS[$(($1 - 1))]}/server.log)"
    return 1
}

start_galera() {
    galera_available || return 1
    local sst n gports=() isports=() sstports=() address
    sst=$(galera_sst_method)
    for n in 1 2 3; do
        gports+=("$(free_port)") || return 1
        isports+=("$(free_port)") || return 1
        sstports+=("$(free_port)") || return 1
    done
    address="gcomm://127.0.0.1:${gports[0]},127.0.0.1:${gports[1]},127.0.0.1:${gports[2]}"
    # start_mariadb keeps one server in MYSQL_*: keep the caller's, start each node with it, and
    # record the node in GALERA_*.
    local saved_dir=${MYSQL_DIR:-} saved_port=${MYSQL_PORT:-} saved_pid=${MYSQL_PID:-}
    local saved_url=${MYSQL_URL:-} rc=0 urls=()
    GALERA_PORTS=()
    GALERA_DIRS=()
    for n in 1 2 3; do
        local i=$((n - 1)) first=()
        [ "$n" -eq 1 ] && first=(--wsrep-new-cluster)
        local wsrep=(
            --wsrep-on=ON
            --wsrep-provider="$GALERA_PROVIDER"
            --wsrep-cluster-name=diesel-lease-test
            --wsrep-cluster-address="$address"
            --wsrep-node-name="node$n"
            --wsrep-node-address="127.0.0.1:${gports[$i]}"
            --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:${gports[$i]};ist.recv_addr=127.0.0.1:${isports[$i]};gcache.size=64M"
            --wsrep-sst-method="$sst"
            --wsrep-sst-receive-address="127.0.0.1:${sstports[$i]}"
            --binlog-format=ROW
            --innodb-autoinc-lock-mode=2
            --default-storage-engine=InnoDB
        )
        MYSQL_DIR= MYSQL_PID= MYSQL_PORT=
        if ! start_mariadb "${wsrep[@]}" "${first[@]}"; then
            GALERA_DIRS+=("$MYSQL_DIR")
            rc=1
            break
        fi
        GALERA_DIRS+=("$MYSQL_DIR")
        GALERA_PORTS+=("$MYSQL_PORT")
        urls+=("$MYSQL_URL")
        # The same node again, as a joiner (a test restarts a node it killed with this).
        {
            echo "#!/usr/bin/env bash"
            [ "$(id -u)" -eq 0 ] && printf '%q ' runuser -u "$(stat -c %U "$MYSQL_DIR")" --
            printf '%q ' "$(mariadbd_bin)" --no-defaults \
                --datadir="$MYSQL_DIR/data" --tmpdir="$MYSQL_DIR/tmp" \
                --socket="$MYSQL_DIR/mysqld.sock" --pid-file="$MYSQL_DIR/mysqld.pid" --log-error="$MYSQL_DIR/server.log" \
                --port="$MYSQL_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
                --max-connections=300 --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
                --innodb-buffer-pool-size=128M --performance-schema=OFF \
                --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci "${wsrep[@]}"
            echo '>/dev/null 2>&1 &'
        } >"$MYSQL_DIR/restart.sh"
        if ! galera_wait_synced "$n"; then
            rc=1
            break
        fi
    done
    MYSQL_DIR=$saved_dir MYSQL_PORT=$saved_port MYSQL_PID=$saved_pid MYSQL_URL=$saved_url
    GALERA_URLS=$(
        IFS=,
        echo "${urls[*]}"
    )
    return "$rc"
}

stop_galera() {
    local saved_dir=${MYSQL_DIR:-} saved_port=${MYSQL_PORT:-} saved_pid=${MYSQL_PID:-} dir
    # Joiners first, the bootstrap node last: a node that leaves last shuts down cleanly.
    for ((i = ${#GALERA_DIRS[@]} - 1; i >= 0; i--)); do
        dir=${GALERA_DIRS[$i]}
        MYSQL_DIR=$dir MYSQL_PID= MYSQL_PORT=
        [ -n "$dir" ] && stop_mariadb
    done
    MYSQL_DIR=$saved_dir MYSQL_PORT=$saved_port MYSQL_PID=$saved_pid
    GALERA_DIRS=()
    GALERA_PORTS=()
    GALERA_URLS=
}
