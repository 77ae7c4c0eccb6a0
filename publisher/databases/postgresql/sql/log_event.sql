-- One event, logged when ${condition} holds.
INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value}, ${transaction_id})
SELECT 'N', ${type_sql}, session_user, ${table_name_sql}, ${key_sql}, ${column_sql}, ${old_sql}, ${new_sql}, txid_current()::text
WHERE ${condition};
