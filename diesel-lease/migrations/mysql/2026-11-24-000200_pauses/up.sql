-- diesel-lease pauses (see the README, section "Pause and resume").
--
-- A row pauses claims from a table: the whole table (key_column = '' and key_value = ''), or
-- its rows whose key_column holds key_value. Claims of a `pausable` model skip paused rows;
-- resuming deletes the row. The table stays tiny: one row per pause in force.
-- key_value keeps the database's default character set and collation: claims compare it with
-- the model's key column, which a table created in the same database has too.
CREATE TABLE diesel_lease_pauses (
    table_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    key_column VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    key_value VARCHAR(255) NOT NULL DEFAULT '',
    paused_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (table_name, key_column, key_value)
) ENGINE = InnoDB;
