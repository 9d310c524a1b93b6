-- diesel-lease rate limits (see the README, section "Rate limits").
--
-- One row per limit and key. Every admission runs in a BEGIN IMMEDIATE transaction, which
-- serializes the decisions (SQLite has one writer at a time); the row keeps the backends alike.
CREATE TABLE diesel_lease_rate_limits (
    scope TEXT NOT NULL,
    rate_key TEXT NOT NULL,
    PRIMARY KEY (scope, rate_key)
);

-- One row per start within the limit's period (older ones are deleted by the next admission
-- of the key). Times are microseconds since 1970 on the database's clock.
CREATE TABLE diesel_lease_rate_starts (
    id INTEGER PRIMARY KEY,
    scope TEXT NOT NULL,
    rate_key TEXT NOT NULL,
    started_at BIGINT NOT NULL
);

CREATE INDEX diesel_lease_rate_starts_window
    ON diesel_lease_rate_starts (scope, rate_key, started_at);
