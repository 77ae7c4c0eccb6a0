-- The capture function of one table's UPDATE and TRUNCATE statements, run once per statement.
-- A TRUNCATE (before it empties the table) logs ${on_truncate}: what deleting every row would. ${on_update}
-- pairs the statement's old and new rows by table_key and logs, in this order: a delete per
-- key only among the old rows, the update events of each key in both, the insert events of
-- each key only among the new rows. A statement that swaps or renumbers keys so updates each
-- key that stays, and, unlike row triggers, never logs an object's insert ahead of its delete.
-- While the row trigger ${row_trigger} is dropped or disabled, capture of the table is off and
-- this function logs nothing either. ${settings}: see trigger_function.
CREATE OR REPLACE FUNCTION ${function}() RETURNS trigger
LANGUAGE plpgsql
${settings}
AS $$$$
BEGIN
    IF NOT EXISTS (
        SELECT FROM pg_catalog.pg_trigger
        WHERE tgrelid = TG_RELID AND tgname = ${row_trigger} AND tgenabled <> 'D'
    ) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
${on_truncate}
        RETURN NULL;
    END IF;
${on_update}
    RETURN NULL;
END
$$$$
