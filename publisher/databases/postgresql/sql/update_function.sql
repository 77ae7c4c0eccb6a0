-- The capture function of one table's UPDATE and TRUNCATE statements, run once per statement.
-- A TRUNCATE (before it empties the table) logs ${on_truncate}: what deleting every row would. ${on_update}
-- pairs the statement's old and new rows by table_key and logs, in this order: a delete per
-- key only among the old rows, the update events of each key in both, the insert events of
-- each key only among the new rows. A statement that swaps or renumbers keys so updates each
-- key that stays, and, unlike row triggers, never logs an object's insert ahead of its delete.
-- While the row trigger is dropped or disabled, capture of the table is off and this function
-- logs nothing either: ${capture_on} (which ${on_update} checks within its INSERT, once per
-- statement) does not hold. ${settings_on}, ${settings_off}: see trigger_function.
CREATE OR REPLACE FUNCTION ${function}() RETURNS trigger
LANGUAGE plpgsql
AS $$${dollar}$$
DECLARE
    _publisher_settings text[];
BEGIN
${settings_on}
    IF TG_OP = 'TRUNCATE' THEN
        IF ${capture_on} THEN
${on_truncate}
        END IF;
    ELSE
${on_update}
    END IF;
${settings_off}
    RETURN NULL;
END
$$${dollar}$$
