-- SQL of the events rows (position, event_type, column_name, logged, old_text, new_text) the
-- table's own capture logs for one kind of row of a statement, for the table as it is now: a row
-- gone ('gone', over _o), kept with its key ('kept', _o and _n), come ('come', _n), in `style`.
-- Field: an insert logs a type 1 per value that is not NULL (one type 1 without a value when all
-- are), an update a type 2 per value whose text changed (a binary value's bytes); row: 5 and 6.
-- The values' texts are what query-back reads: a binary value base64, anything else its text.
-- A list with nothing to log is one row that is not logged.
CREATE OR REPLACE FUNCTION ${function}(relation oid, style text, kind text) RETURNS text
LANGUAGE sql STABLE
AS $$${dollar}$$
    WITH value_column AS (
        SELECT row_number() OVER (ORDER BY a.attnum) AS position, a.attname AS name,
               a.atttypid = 'bytea'::regtype AS is_binary
        FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = relation AND a.attnum > 0 AND NOT a.attisdropped
          AND a.attnum <> ALL (COALESCE((SELECT i.indkey::int2[] FROM pg_catalog.pg_index AS i
                                         WHERE i.indrelid = relation AND i.indisprimary), '{}'))
    ), text_of AS (
        SELECT position, name,
               CASE WHEN is_binary THEN format('translate(encode(_o.%I, ''base64''), E''\n'', '''')', name)
                    ELSE format('_o.%I::text', name) END AS old_text,
               CASE WHEN is_binary THEN format('translate(encode(_n.%I, ''base64''), E''\n'', '''')', name)
                    ELSE format('_n.%I::text', name) END AS new_text,
               CASE WHEN is_binary THEN format('_o.%1$$I IS DISTINCT FROM _n.%1$$I', name)
                    ELSE format('(_o.%1$$I::text COLLATE "C") IS DISTINCT FROM (_n.%1$$I::text COLLATE "C")', name)
               END AS changed
        FROM value_column
    )
    SELECT CASE
        WHEN kind = 'gone' THEN '(1, 4, NULL::text, TRUE, NULL::text, NULL::text)'
        WHEN kind = 'come' AND (style = 'row' OR NOT EXISTS (SELECT FROM text_of))
            THEN '(1, 5, NULL::text, TRUE, NULL::text, NULL::text)'
        WHEN kind = 'come' THEN
            (SELECT string_agg(format('(%s, 1, %L::text, _n.%I IS NOT NULL, NULL::text, %s)',
                                      position, name, name, new_text), ', ' ORDER BY position) FROM text_of)
            || format(', (%s, 1, %L::text, %s, NULL::text, NULL::text)',
                      (SELECT count(*) + 1 FROM text_of), (SELECT name FROM text_of WHERE position = 1),
                      (SELECT string_agg(format('_n.%I IS NULL', name), ' AND ') FROM text_of))
        WHEN style = 'row' THEN
            format('(1, 6, NULL::text, %s, NULL::text, NULL::text)',
                   COALESCE((SELECT string_agg('(' || changed || ')', ' OR ') FROM text_of), 'FALSE'))
        ELSE COALESCE(
            (SELECT string_agg(format('(%s, 2, %L::text, %s, %s, %s)', position, name, changed, old_text, new_text),
                               ', ' ORDER BY position) FROM text_of),
            '(0, 0, NULL::text, FALSE, NULL::text, NULL::text)')
    END
$$${dollar}$$
