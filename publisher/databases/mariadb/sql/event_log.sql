-- The event log table (docs/concepts/event-log.md) on MariaDB and MySQL. event_time is UTC: a DATETIME holds no
-- zone, and UTC_TIMESTAMP() does not depend on the changing session's time_zone. The table is
-- utf8mb4 with a binary collation, so a logged value keeps every character and byte.
CREATE TABLE IF NOT EXISTS ${event_log} (
    ${record_id} BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    ${status} CHAR(1) NOT NULL DEFAULT 'N',
    ${event_type} INT NOT NULL,
    ${event_time} DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    ${perpetrator} VARCHAR(255),
    ${table_name} VARCHAR(255) NOT NULL,
    ${table_key} LONGTEXT NOT NULL,
    ${column_name} VARCHAR(255),
    ${old_value} LONGTEXT,
    ${new_value} LONGTEXT,
    ${transaction_id} VARCHAR(64)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
