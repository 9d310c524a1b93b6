-- diesel-lease pauses (see the README, section "Pause and resume").
--
-- A row pauses claims from a table: the whole table (key_column = '' and key_value = ''), or
-- its rows whose key_column holds key_value. Claims of a `pausable` model skip paused rows;
-- resuming deletes the row. The table stays tiny: one row per pause in force.
CREATE TABLE diesel_lease_pauses (
    table_name TEXT NOT NULL,
    key_column TEXT NOT NULL DEFAULT '',
    key_value TEXT NOT NULL DEFAULT '',
    paused_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, key_column, key_value)
);
