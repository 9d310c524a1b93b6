-- diesel-lease semaphores and reader/writer locks (see the README, section "Semaphores, mutexes and reader/writer locks").
--
-- One row per resource. Every change to a resource's queue first locks this row
-- (SELECT ... FOR UPDATE), which serializes admission decisions per resource.
-- Names compare byte-wise (utf8mb4_bin), as on PostgreSQL and SQLite.
CREATE TABLE diesel_lease_semaphores (
    resource VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    permits INT NOT NULL,
    CONSTRAINT diesel_lease_semaphores_permits CHECK (permits > 0)
) ENGINE = InnoDB;

-- One row per request: waiting (granted = 0) or holding (granted = 1).
-- Times are microseconds since 1970 on the database's clock (UTC).
CREATE TABLE diesel_lease_semaphore_tickets (
    ticket BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    resource VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    mode VARCHAR(16) NOT NULL,
    granted BOOLEAN NOT NULL DEFAULT FALSE,
    requested_at BIGINT NOT NULL,
    granted_at BIGINT NULL,
    expires_at BIGINT NOT NULL,
    CONSTRAINT diesel_lease_semaphore_tickets_mode CHECK (mode IN ('shared', 'exclusive')),
    INDEX diesel_lease_semaphore_tickets_queue (resource, ticket)
) ENGINE = InnoDB;
