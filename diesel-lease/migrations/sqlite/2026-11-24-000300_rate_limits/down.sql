DROP TABLE diesel_lease_rate_starts;
DROP TABLE diesel_lease_rate_limits;
