-- The event log table (docs/concepts/event-log.md); event_time is UTC text with milliseconds.
CREATE TABLE IF NOT EXISTS ${event_log} (
    ${record_id} INTEGER PRIMARY KEY AUTOINCREMENT,
    ${status} CHAR(1) NOT NULL DEFAULT 'N',
    ${event_type} INTEGER NOT NULL,
    ${event_time} TIMESTAMP NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    ${perpetrator} VARCHAR(255),
    ${table_name} VARCHAR(255) NOT NULL,
    ${table_key} TEXT NOT NULL,
    ${column_name} VARCHAR(255),
    ${old_value} TEXT,
    ${new_value} TEXT,
    ${transaction_id} VARCHAR(64)
)
