DROP TABLE diesel_lease_leases;
