-- diesel-lease semaphores and reader/writer locks (see the README, section "Semaphores, mutexes and reader/writer locks").
--
-- One row per resource. Every change to a resource's queue first locks this row
-- (SELECT ... FOR UPDATE), which serializes admission decisions per resource.
CREATE TABLE diesel_lease_semaphores (
    resource VARCHAR(255) PRIMARY KEY,
    permits INTEGER NOT NULL CHECK (permits > 0)
);

-- One row per request: waiting (granted = false) or holding (granted = true).
-- Times are microseconds since 1970 on the database's clock.
CREATE TABLE diesel_lease_semaphore_tickets (
    ticket BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource VARCHAR(255) NOT NULL,
    owner VARCHAR(255) NOT NULL,
    mode VARCHAR(16) NOT NULL CHECK (mode IN ('shared', 'exclusive')),
    granted BOOLEAN NOT NULL DEFAULT FALSE,
    requested_at BIGINT NOT NULL,
    granted_at BIGINT,
    expires_at BIGINT NOT NULL
);

CREATE INDEX diesel_lease_semaphore_tickets_queue
    ON diesel_lease_semaphore_tickets (resource, ticket);
