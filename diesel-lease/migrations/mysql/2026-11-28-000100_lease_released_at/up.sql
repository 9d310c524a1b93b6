-- When the last grant was released (µs since 1970, database clock); NULL while it is held or
-- once it expired unreleased. Extensions match only a grant not yet released, so an extension
-- that reaches the database after the release (a keep-alive beat sent before it) changes
-- nothing, even while `at_least_for` keeps the released lease from being granted again.
ALTER TABLE diesel_lease_leases ADD COLUMN released_at BIGINT NULL;
