-- The events of an UPDATE statement, in one INSERT: its old rows (_o) and new rows (_n) are
-- paired by ${same}, the side a key lacks NULL; each row of ${fields} (kind, position,
-- event_type, column_name, logged, old_text, new_text) is one event, logged where logged holds.
-- Kind 1 is a key only among the old rows (logged with its table_key ${old_key}), 2 a key in
-- both, 3 a key only among the new rows (both with ${new_key}). record_ids follow the kinds,
-- then the table_keys, the positions and the values, and none while ${switched_on} does not hold.
-- One statement rather than one per kind: most UPDATEs change one row, and there starting a
-- statement costs more than its rows.
INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value}, ${transaction_id})
SELECT 'N', v.event_type, session_user, ${table_name_sql}, CASE WHEN v.kind = 1 THEN ${old_key} ELSE ${new_key} END, v.column_name, v.old_text, v.new_text, txid_current()::text
FROM ${old_rows} AS _o FULL JOIN ${new_rows} AS _n ON ${same}
CROSS JOIN LATERAL (VALUES
${fields}
) AS v(kind, position, event_type, column_name, logged, old_text, new_text)
WHERE v.logged AND ${switched_on}
ORDER BY v.kind, 5, v.position, 7, 8;
