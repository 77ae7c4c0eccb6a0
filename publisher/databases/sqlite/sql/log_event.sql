-- One event, logged when ${condition} holds. SQLite has no session user: perpetrator stays NULL.
INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value})
SELECT 'N', ${type_sql}, NULL, ${table_name_sql}, ${key_sql}, ${column_sql}, ${old_sql}, ${new_sql}
WHERE ${condition};
