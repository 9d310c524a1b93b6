ALTER TABLE diesel_lease_leases DROP COLUMN released_at;
