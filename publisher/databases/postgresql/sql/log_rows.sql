-- The events of the rows of ${rows}: one per row of ${fields} (position, event_type,
-- column_name, logged, old_text, new_text) where ${condition} holds (the event is logged, and
-- the row's key is of the kind this statement logs). record_ids follow the table_keys, then
-- the positions, then the values (several rows of a child table share their parent's key).
INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value}, ${transaction_id})
SELECT 'N', v.event_type, session_user, ${table_name_sql}, ${key_sql}, v.column_name, v.old_text, v.new_text, txid_current()::text
FROM ${rows}
CROSS JOIN LATERAL (VALUES
${fields}
) AS v(position, event_type, column_name, logged, old_text, new_text)
WHERE ${condition}
ORDER BY 5, v.position, 7, 8;
