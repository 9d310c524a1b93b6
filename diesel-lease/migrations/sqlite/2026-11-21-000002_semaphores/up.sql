-- diesel-lease semaphores and reader/writer locks (see the README, section "Semaphores, mutexes and reader/writer locks").
--
-- One row per resource. Every change to a resource's queue runs in a BEGIN IMMEDIATE
-- transaction, which serializes admission decisions (SQLite has one writer at a time).
CREATE TABLE diesel_lease_semaphores (
    resource TEXT NOT NULL PRIMARY KEY CHECK (length(resource) BETWEEN 1 AND 255),
    permits INTEGER NOT NULL CHECK (permits > 0)
);

-- One row per request: waiting (granted = 0) or holding (granted = 1).
-- Times are microseconds since 1970 on the database's clock.
-- AUTOINCREMENT: a ticket number is never reused, even after the newest ticket is deleted.
CREATE TABLE diesel_lease_semaphore_tickets (
    ticket INTEGER PRIMARY KEY AUTOINCREMENT,
    resource TEXT NOT NULL,
    owner TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('shared', 'exclusive')),
    granted BOOLEAN NOT NULL DEFAULT 0,
    requested_at BIGINT NOT NULL,
    granted_at BIGINT,
    expires_at BIGINT NOT NULL
);

CREATE INDEX diesel_lease_semaphore_tickets_queue
    ON diesel_lease_semaphore_tickets (resource, ticket);
