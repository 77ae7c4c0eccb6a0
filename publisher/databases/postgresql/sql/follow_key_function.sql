-- SQL of the table_key of a row of ${alias} in a table whose capture names no column (see
-- follow_function), built from the table as it is now: each part of its primary key (for a
-- child table of a logical class, each (name, attnum) pair of its arguments after the fourth:
-- the parent's key column, the child's column holding it) as `name=` and its text, as the installed capture
-- spells it: an integer as it is, a binary value as base64, anything else its text through
-- ${key_value}; parts joined by '+'. A table without a primary key gets '' (the publisher
-- rejects such an event, saying why), never a NULL the event log refuses.
CREATE OR REPLACE FUNCTION ${function}(relation oid, arguments text[], alias text) RETURNS text
LANGUAGE sql STABLE
AS $$${dollar}$$
    SELECT COALESCE(string_agg(
        format('%L || %s', part.name || '=', CASE
            WHEN a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)
                THEN format('%I.%I::text', alias, a.attname)
            WHEN a.atttypid = 'bytea'::regtype
                THEN format('%s(translate(encode(%I.%I, ''base64''), E''\n'', ''''))', ${key_value_literal}, alias, a.attname)
            ELSE format('%s(%I.%I::text)', ${key_value_literal}, alias, a.attname)
        END),
        ' || ''+'' || ' ORDER BY part.position), '''''')
    FROM (
        SELECT k.attname AS name, p.attnum, p.position
        FROM pg_catalog.pg_index AS i
        CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS p(attnum, position)
        JOIN pg_catalog.pg_attribute AS k ON k.attrelid = i.indrelid AND k.attnum = p.attnum
        WHERE i.indrelid = relation AND i.indisprimary AND coalesce(array_length(arguments, 1), 0) <= 4
        UNION ALL
        SELECT arguments[3 + 2 * n], arguments[4 + 2 * n]::int2, n
        FROM generate_series(1, (coalesce(array_length(arguments, 1), 0) - 4) / 2) AS n
    ) AS part
    JOIN pg_catalog.pg_attribute AS a ON a.attrelid = relation AND a.attnum = part.attnum AND NOT a.attisdropped
$$${dollar}$$
