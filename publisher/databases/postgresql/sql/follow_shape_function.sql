-- A table's shape as the database tells it: each column with its type, in order, then its
-- primary key. The event trigger compares it with what `install` recorded, so that only a
-- migration that changes it (not ENABLE TRIGGER, SET STATISTICS, ...) moves the table's capture.
CREATE OR REPLACE FUNCTION ${function}(relation oid) RETURNS text
LANGUAGE sql STABLE
AS $$${dollar}$$
    SELECT string_agg(quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
        || ' key ' || COALESCE((
            SELECT string_agg(quote_ident(k.attname), ', ' ORDER BY p.position)
            FROM pg_catalog.pg_index AS i
            CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS p(attnum, position)
            JOIN pg_catalog.pg_attribute AS k ON k.attrelid = i.indrelid AND k.attnum = p.attnum
            WHERE i.indrelid = relation AND i.indisprimary), '')
    FROM pg_catalog.pg_attribute AS a
    WHERE a.attrelid = relation AND a.attnum > 0 AND NOT a.attisdropped
$$${dollar}$$
