-- Whether capture of the table is on: its row trigger ${row_trigger} is there and enabled. The
-- UPDATE statement's INSERT holds it, so PostgreSQL checks it once per statement, before
-- reading any row, and a dropped or disabled row trigger switches the UPDATE trigger off too.
EXISTS (
    SELECT FROM pg_catalog.pg_trigger
    WHERE tgrelid = TG_RELID AND tgname = ${row_trigger} AND tgenabled <> 'D'
)
