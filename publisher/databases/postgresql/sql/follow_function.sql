-- The capture of a table a migration changed, from the migration's own transaction until the
-- publisher reinstalls the table's own (follow_event_trigger): it names no column, so no
-- migration can break it. It logs what the table's own capture would for the table as it is
-- now (${events_function}, keys by ${key_function}), one dynamic statement per trigger call;
-- for a child table of a logical class, a type 8 of its attribute per parent it touches.
-- TG_ARGV: the table's row trigger (its capture's switch: see update_function), the table_name
-- its events carry, the style, the child's attribute or '', then the child's key pairs. One
-- function serves the row trigger (INSERT, DELETE) and the statement triggers (UPDATE,
-- TRUNCATE). ${settings}: see trigger_function.
CREATE OR REPLACE FUNCTION ${function}() RETURNS trigger
LANGUAGE plpgsql
${settings}
AS $$${dollar}$$
DECLARE
    _none text := format('(SELECT * FROM ONLY %s WHERE FALSE)', TG_RELID::regclass);
    _old text := _none || ' AS _o';
    _new text := _none || ' AS _n';
    _arguments text[] := ARRAY(SELECT TG_ARGV[n] FROM generate_series(0, TG_NARGS - 1) AS n);
    _old_key text := ${key_function}(TG_RELID, _arguments, '_o');
    _new_key text := ${key_function}(TG_RELID, _arguments, '_n');
    _attribute text := nullif(TG_ARGV[3], '');
BEGIN
    IF TG_LEVEL = 'STATEMENT' AND NOT EXISTS (
        SELECT FROM pg_catalog.pg_trigger
        WHERE tgrelid = TG_RELID AND tgname = TG_ARGV[0] AND tgenabled <> 'D'
    ) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        _new := '(SELECT ($$1).*) AS _n';
    ELSIF TG_OP = 'DELETE' THEN
        _old := '(SELECT ($$1).*) AS _o';
    ELSIF TG_OP = 'UPDATE' THEN
        _old := '${old_rows} AS _o';
        _new := '${new_rows} AS _n';
    ELSE
        _old := format('ONLY %s AS _o', TG_RELID::regclass);
    END IF;
    IF _attribute IS NOT NULL THEN
        EXECUTE format($$q$$
            INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value}, ${transaction_id})
            SELECT 'N', 8, session_user, %1$$L, e.k, %2$$L, NULL, NULL, txid_current()::text
            FROM (SELECT DISTINCT k FROM (SELECT (%5$$s) AS k FROM %3$$s UNION ALL SELECT (%6$$s) FROM %4$$s) AS p) AS e
            WHERE e.k IS NOT NULL
            ORDER BY e.k COLLATE "C"
        $$q$$, TG_ARGV[1], _attribute, _old, _new, _old_key, _new_key)
        USING CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
        RETURN NULL;
    END IF;
    EXECUTE format($$q$$
        INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value}, ${transaction_id})
        SELECT 'N', e.event_type, session_user, %1$$L, e.k, e.column_name, e.old_text, e.new_text, txid_current()::text
        FROM (
            SELECT 1 AS place, (%4$$s) AS k, v.* FROM %2$$s
            CROSS JOIN LATERAL (VALUES %6$$s) AS v(position, event_type, column_name, logged, old_text, new_text)
            WHERE NOT EXISTS (SELECT FROM %3$$s WHERE (%5$$s) COLLATE "C" = (%4$$s) COLLATE "C")
            UNION ALL
            SELECT 2, (%5$$s), v.* FROM %2$$s JOIN %3$$s ON (%5$$s) COLLATE "C" = (%4$$s) COLLATE "C"
            CROSS JOIN LATERAL (VALUES %7$$s) AS v(position, event_type, column_name, logged, old_text, new_text)
            UNION ALL
            SELECT 3, (%5$$s), v.* FROM %3$$s
            CROSS JOIN LATERAL (VALUES %8$$s) AS v(position, event_type, column_name, logged, old_text, new_text)
            WHERE NOT EXISTS (SELECT FROM %2$$s WHERE (%4$$s) COLLATE "C" = (%5$$s) COLLATE "C")
        ) AS e
        WHERE e.logged AND e.k IS NOT NULL
        ORDER BY e.place, e.k, e.position, e.old_text, e.new_text
    $$q$$, TG_ARGV[1], _old, _new, _old_key, _new_key,
        ${events_function}(TG_RELID, TG_ARGV[2], 'gone'), ${events_function}(TG_RELID, TG_ARGV[2], 'kept'),
        ${events_function}(TG_RELID, TG_ARGV[2], 'come'))
    USING CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    RETURN NULL;
END
$$${dollar}$$
