-- One event per ${fields} row (event_type, column_name, logged, old_text, new_text) whose
-- logged is true, in one statement; record_ids follow the rows' order.
INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value}, ${transaction_id})
SELECT 'N', v.event_type, session_user, ${table_name_sql}, ${key_sql}, v.column_name, v.old_text, v.new_text, txid_current()::text
FROM (VALUES
${fields}
) AS v(event_type, column_name, logged, old_text, new_text)
WHERE v.logged;
