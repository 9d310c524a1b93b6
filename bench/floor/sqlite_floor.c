/*
 * diesel-lease-bench's SQLite floor (issue 23): the claim + owner-checked complete that
 * diesel-lease's SQLite dialect runs, as literal SQL over the sqlite3 C library, with no Rust,
 * no Diesel and no diesel-lease in the way. The benchmark compiles it at run time
 * (`cc -O2 -o sqlite_floor sqlite_floor.c -lsqlite3 -lpthread`) and runs K processes of it at
 * once, or one process of K threads (the THREADS argument).
 *
 *   sqlite_floor DB N OWNER SECONDS [THREADS]
 *                                     claims N rows per transaction (1 or up to 50) and completes
 *                                     them, until SECONDS have passed; prints the number of jobs
 *                                     it completed and exits 0 (2 if the table ran dry first).
 *                                     THREADS (default 1) runs that many threads in this process,
 *                                     each with its own connection, as diesel-lease's threads
 *                                     with one pooled connection each; the count is their sum.
 *   sqlite_floor --version            prints the SQLite library version.
 *
 * Statements (N = 1), as diesel-lease's SQLite dialect sends them (results.json holds ours as
 * Diesel's instrumentation saw them):
 *   BEGIN IMMEDIATE
 *   UPDATE bench_jobs SET status = 'running', owner = 'OWNER', claimed_at = <now>,
 *     attempts = attempts + 1 WHERE (id) IN (SELECT id FROM bench_jobs WHERE (status = 'ready')
 *     ORDER BY id ASC LIMIT N) RETURNING id, status, owner, claimed_at, attempts, payload
 *   COMMIT
 *   UPDATE bench_jobs SET status = 'done' WHERE (id = ?) AND status = 'running'
 *     AND owner = 'OWNER' AND attempts = ?                      (autocommit)
 * With N > 1 the complete is one statement over the N claims, as `complete_batch` sends it:
 *   UPDATE bench_jobs SET status = 'done' WHERE status = 'running' AND
 *     ((id = ? AND owner = 'OWNER' AND attempts = ?) OR … N times)  (autocommit)
 * Every statement is prepared once and reused, as Diesel's statement cache does.
 */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_N 50
#define MAX_THREADS 64

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(sqlite3 *db, const char *what) {
    fprintf(stderr, "sqlite_floor: %s: %s\n", what, db ? sqlite3_errmsg(db) : "");
    exit(1);
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, NULL) != SQLITE_OK)
        die(db, sql);
    return s;
}

/* Runs a statement that returns no rows. */
static void run(sqlite3 *db, sqlite3_stmt *s, const char *what) {
    if (sqlite3_step(s) != SQLITE_DONE)
        die(db, what);
    sqlite3_reset(s);
}

/* One worker: its own connection, the loop below; its count and exit code come back here. */
struct worker {
    const char *path;
    const char *owner;
    int n;
    double until;
    long long done;
    int code;
};

static void *work(void *arg) {
    struct worker *w = arg;
    const char *owner = w->owner;
    int n = w->n;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(w->path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
        die(db, "open");
    /* diesel-lease's ConnectionTuning: busy timeout 30 s, WAL, synchronous NORMAL. */
    if (sqlite3_exec(db,
                     "PRAGMA busy_timeout = 30000; PRAGMA journal_mode = WAL; "
                     "PRAGMA synchronous = NORMAL;",
                     NULL, NULL, NULL) != SQLITE_OK)
        die(db, "pragmas");

    char sql[8192];
    sqlite3_stmt *begin = prepare(db, "BEGIN IMMEDIATE");
    sqlite3_stmt *commit = prepare(db, "COMMIT");
    snprintf(sql, sizeof sql,
             "UPDATE bench_jobs SET status = 'running', owner = '%s', "
             "claimed_at = strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now'), attempts = attempts + 1 "
             "WHERE (id) IN (SELECT id FROM bench_jobs WHERE (status = 'ready') ORDER BY id ASC "
             "LIMIT %d) RETURNING id, status, owner, claimed_at, attempts, payload",
             owner, n);
    sqlite3_stmt *claim = prepare(db, sql);
    sqlite3_stmt *complete;
    if (n == 1) {
        snprintf(sql, sizeof sql,
                 "UPDATE bench_jobs SET status = 'done' WHERE (id = ?1) AND status = 'running' "
                 "AND owner = '%s' AND attempts = ?2",
                 owner);
    } else {
        int len = snprintf(sql, sizeof sql,
                           "UPDATE bench_jobs SET status = 'done' WHERE status = 'running' AND (");
        for (int i = 0; i < n; i++)
            len += snprintf(sql + len, sizeof sql - (size_t)len,
                            "%s((id = ?%d) AND owner = '%s' AND attempts = ?%d)", i ? " OR " : "",
                            2 * i + 1, owner, 2 * i + 2);
        snprintf(sql + len, sizeof sql - (size_t)len, ")");
    }
    complete = prepare(db, sql);

    long long done = 0;
    sqlite3_int64 ids[MAX_N];
    int attempts[MAX_N];
    size_t payload_bytes = 0;
    w->code = 0;
    while (now() < w->until) {
        run(db, begin, "BEGIN IMMEDIATE");
        int got = 0, rc;
        while ((rc = sqlite3_step(claim)) == SQLITE_ROW) {
            ids[got] = sqlite3_column_int64(claim, 0);
            attempts[got] = sqlite3_column_int(claim, 4);
            /* Read every column, as a client that loads the row does. */
            payload_bytes += (size_t)sqlite3_column_bytes(claim, 1);
            payload_bytes += (size_t)sqlite3_column_bytes(claim, 2);
            payload_bytes += (size_t)sqlite3_column_bytes(claim, 3);
            payload_bytes += (size_t)sqlite3_column_bytes(claim, 5);
            got++;
        }
        if (rc != SQLITE_DONE)
            die(db, "claim");
        sqlite3_reset(claim);
        run(db, commit, "COMMIT");
        if (got == 0) {
            fprintf(stderr, "sqlite_floor: the table ran dry\n");
            w->code = 2;
            break;
        }
        if (n == 1) {
            sqlite3_bind_int64(complete, 1, ids[0]);
            sqlite3_bind_int(complete, 2, attempts[0]);
            run(db, complete, "complete");
            if (sqlite3_changes(db) != 1) {
                fprintf(stderr, "sqlite_floor: a fresh claim was not ours\n");
                w->code = 1;
                break;
            }
            done += 1;
        } else {
            for (int i = 0; i < n; i++) {
                sqlite3_bind_int64(complete, 2 * i + 1, i < got ? ids[i] : 0);
                sqlite3_bind_int(complete, 2 * i + 2, i < got ? attempts[i] : 0);
            }
            run(db, complete, "complete");
            int moved = sqlite3_changes(db);
            if (moved != got) {
                fprintf(stderr, "sqlite_floor: a fresh claim was not ours\n");
                w->code = 1;
                break;
            }
            done += moved;
        }
    }
    if (w->code == 0 && payload_bytes == 0 && done > 0)
        w->code = 1;
    w->done = done;
    sqlite3_finalize(begin);
    sqlite3_finalize(commit);
    sqlite3_finalize(claim);
    sqlite3_finalize(complete);
    sqlite3_close(db);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("%s\n", sqlite3_libversion());
        return 0;
    }
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: sqlite_floor DB N OWNER SECONDS [THREADS] | --version\n");
        return 64;
    }
    int n = atoi(argv[2]);
    const char *owner = argv[3];
    int threads = argc == 6 ? atoi(argv[5]) : 1;
    if (n < 1 || n > MAX_N || strchr(owner, '\'') != NULL || threads < 1 ||
        threads > MAX_THREADS) {
        fprintf(stderr, "sqlite_floor: N must be 1..%d, OWNER without quotes, THREADS 1..%d\n",
                MAX_N, MAX_THREADS);
        return 64;
    }
    struct worker workers[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    double until = now() + atof(argv[4]);
    for (int i = 0; i < threads; i++) {
        workers[i] = (struct worker){argv[1], owner, n, until, 0, 0};
        if (pthread_create(&ids[i], NULL, work, &workers[i]) != 0) {
            fprintf(stderr, "sqlite_floor: pthread_create failed\n");
            return 1;
        }
    }
    long long done = 0;
    int code = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        done += workers[i].done;
        if (workers[i].code > code)
            code = workers[i].code;
    }
    printf("%lld\n", done);
    return code;
}
