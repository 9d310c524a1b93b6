-- diesel-lease rate limits (see the README, section "Rate limits").
--
-- One row per limit and key: the row every admission of that key locks first
-- (SELECT ... FOR UPDATE), which serializes the decisions for one key across the farm.
-- Keys compare byte-wise (utf8mb4_bin), as on PostgreSQL and SQLite.
CREATE TABLE diesel_lease_rate_limits (
    scope VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    rate_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (scope, rate_key)
) ENGINE = InnoDB;

-- One row per start within the limit's period (older ones are deleted by the next admission
-- of the key). Times are microseconds since 1970 on the database's clock (UTC).
CREATE TABLE diesel_lease_rate_starts (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    scope VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    rate_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    started_at BIGINT NOT NULL,
    INDEX diesel_lease_rate_starts_window (scope, rate_key, started_at)
) ENGINE = InnoDB;
