-- diesel-lease leases: one row per lease name, never deleted (the fencing token lives in it).
-- Times are microseconds since 1970 from the database clock (clock_timestamp()).
CREATE TABLE diesel_lease_leases (
    name VARCHAR(255) PRIMARY KEY,
    holder VARCHAR(255) NOT NULL,
    token BIGINT NOT NULL,
    acquired_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    next_run BIGINT NULL
);
