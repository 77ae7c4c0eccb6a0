-- Run at the end of every ALTER TABLE: each table of ${capture} the command changed the shape of
-- (${shape_function}, against what install recorded) whose capture is on gets the column-blind
-- capture of ${follow_function} in place of its own, in the migration's own transaction, so
-- that none of the application's later statements names a column that is gone; the row is
-- marked followed, and the publisher's next cycle reinstalls the table's own capture. Each
-- changed table's shape record (${shapes}) marks where its events change shape. A failure here
-- is a warning: it must not fail the migration either. A command on no table of the schema
-- returns at once: the trigger fires for every ALTER TABLE of the database, by users who may
-- not even see the schema.
CREATE OR REPLACE FUNCTION ${function}() RETURNS event_trigger
LANGUAGE plpgsql
AS $$${dollar}$$
DECLARE
    _table record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger_ddl_commands() AS command
                   JOIN pg_catalog.pg_class AS c ON c.oid = command.objid
                   WHERE command.classid = 'pg_catalog.pg_class'::regclass
                     AND c.relnamespace = ${schema_literal}::regnamespace) THEN
        RETURN;
    END IF;
    FOR _table IN
        SELECT DISTINCT c.oid::regclass AS relation, s.table_name, s.follow_triggers, s.follow_arguments
        FROM pg_catalog.pg_event_trigger_ddl_commands() AS command
        JOIN pg_catalog.pg_class AS c ON c.oid = command.objid
        JOIN ${capture} AS s ON s.table_name = c.relname
        WHERE command.classid = 'pg_catalog.pg_class'::regclass
          AND c.relnamespace = ${schema_literal}::regnamespace
          AND s.follow_arguments IS NOT NULL
          AND ${shape_function}(c.oid) IS DISTINCT FROM s.follow_shape
    LOOP
        PERFORM ${follow_table}(_table.relation, _table.follow_triggers, _table.follow_arguments);
        UPDATE ${capture} SET followed_at = clock_timestamp() WHERE table_name = _table.table_name;
    END LOOP;
    -- Where the events of the published tables the command changed take their new shape, which
    -- the publisher's next cycle records (NULL: not told here).
    BEGIN
        INSERT INTO ${shapes} (table_name, from_record_id, columns, recorded_at)
        SELECT s.relname, GREATEST(${next_record_id}, (SELECT COALESCE(MAX(r.from_record_id), 0)
                                                        FROM ${shapes} AS r WHERE r.table_name = s.relname)),
               NULL, clock_timestamp()
        FROM (
            SELECT DISTINCT c.relname
            FROM pg_catalog.pg_event_trigger_ddl_commands() AS command
            JOIN pg_catalog.pg_class AS c ON c.oid = command.objid
            JOIN ${capture} AS s ON s.table_name = c.relname
            WHERE command.classid = 'pg_catalog.pg_class'::regclass
              AND c.relnamespace = ${schema_literal}::regnamespace
              AND lower(s.table_name) = lower(s.published_as)
              AND ${shape_function}(c.oid) IS DISTINCT FROM s.follow_shape
        ) AS s
        -- Never before the table's newest record, which no event follows when the log was
        -- emptied since; at its place (or the last migration's), this one decides from there on.
        ON CONFLICT (table_name, from_record_id) DO UPDATE SET columns = NULL, recorded_at = EXCLUDED.recorded_at;
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'publisher: where the migrated tables change shape could not be recorded: %', SQLERRM;
    END;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'publisher: capture could not follow the migration: %', SQLERRM;
END
$$${dollar}$$
