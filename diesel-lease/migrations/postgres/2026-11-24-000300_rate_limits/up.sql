-- diesel-lease rate limits (see the README, section "Rate limits").
--
-- One row per limit and key: the row every admission of that key locks first
-- (SELECT ... FOR UPDATE), which serializes the decisions for one key across the farm.
CREATE TABLE diesel_lease_rate_limits (
    scope VARCHAR(255) NOT NULL,
    rate_key VARCHAR(255) NOT NULL,
    PRIMARY KEY (scope, rate_key)
);

-- One row per start within the limit's period (older ones are deleted by the next admission
-- of the key). Times are microseconds since 1970 on the database's clock.
CREATE TABLE diesel_lease_rate_starts (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope VARCHAR(255) NOT NULL,
    rate_key VARCHAR(255) NOT NULL,
    started_at BIGINT NOT NULL
);

CREATE INDEX diesel_lease_rate_starts_window
    ON diesel_lease_rate_starts (scope, rate_key, started_at);
