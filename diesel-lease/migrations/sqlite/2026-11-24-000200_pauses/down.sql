DROP TABLE diesel_lease_pauses;
