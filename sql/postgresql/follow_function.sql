-- The capture of a table a migration changed, from the migration's own transaction until the
-- publisher reinstalls the table's own (follow_event_trigger): it names no column, so no
-- migration can break it. It logs query-backs (an insert 5, an update that changed the row's
-- text 6; for a child table of a logical class, a type 8 of its attribute per parent) and
-- deletes (4), keyed by ${key_function} over the table as it is now. TG_ARGV: the table's row
-- trigger (its capture's switch: see update_function), the table_name its events carry, the
-- child's attribute or '', then the child's key pairs. One function serves the row trigger
-- (INSERT, DELETE) and the statement triggers (UPDATE, TRUNCATE). ${settings}: see trigger_function.
CREATE OR REPLACE FUNCTION ${function}() RETURNS trigger
LANGUAGE plpgsql
${settings}
AS $$$$
DECLARE
    _none text := format('(SELECT * FROM ONLY %s WHERE FALSE)', TG_RELID::regclass);
    _old text := _none || ' AS _o';
    _new text := _none || ' AS _n';
    _arguments text[] := ARRAY(SELECT TG_ARGV[n] FROM generate_series(0, TG_NARGS - 1) AS n);
    _old_key text := ${key_function}(TG_RELID, _arguments, '_o');
    _new_key text := ${key_function}(TG_RELID, _arguments, '_n');
    _attribute text := nullif(TG_ARGV[2], '');
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
    EXECUTE format($$q$$
        INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value}, ${transaction_id})
        SELECT 'N', CASE WHEN %3$$L IS NULL THEN e.event_type ELSE 8 END, session_user, %4$$L, e.k, %3$$L, NULL, NULL, txid_current()::text
        FROM (
            SELECT 1 AS place, 4 AS event_type, o.k FROM (SELECT %5$$s AS k FROM %1$$s) AS o
            WHERE NOT EXISTS (SELECT FROM (SELECT %6$$s AS k FROM %2$$s) AS n WHERE n.k COLLATE "C" = o.k COLLATE "C")
            UNION ALL
            SELECT 2, 6, n.k FROM (SELECT %5$$s AS k, _o::text AS r FROM %1$$s) AS o
            JOIN (SELECT %6$$s AS k, _n::text AS r FROM %2$$s) AS n ON n.k COLLATE "C" = o.k COLLATE "C"
            WHERE o.r IS DISTINCT FROM n.r OR %3$$L IS NOT NULL
            UNION ALL
            SELECT 3, 5, n.k FROM (SELECT %6$$s AS k FROM %2$$s) AS n
            WHERE NOT EXISTS (SELECT FROM (SELECT %5$$s AS k FROM %1$$s) AS o WHERE n.k COLLATE "C" = o.k COLLATE "C")
        ) AS e
        WHERE e.k IS NOT NULL
        GROUP BY e.k, e.event_type, e.place
        ORDER BY e.place, e.k COLLATE "C"
    $$q$$, _old, _new, _attribute, TG_ARGV[1], _old_key, _new_key)
    USING CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    RETURN NULL;
END
$$$$
