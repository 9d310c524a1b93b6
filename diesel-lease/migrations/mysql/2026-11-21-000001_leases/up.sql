-- diesel-lease leases: one row per lease name, never deleted (the fencing token lives in it).
-- Times are microseconds since 1970 from the database clock (UTC_TIMESTAMP(6)).
-- Names compare byte-wise (utf8mb4_bin): "Report" and "report" are two leases, as on the other backends.
CREATE TABLE diesel_lease_leases (
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    holder VARCHAR(255) NOT NULL,
    token BIGINT NOT NULL,
    acquired_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    next_run BIGINT NULL
) ENGINE = InnoDB;
