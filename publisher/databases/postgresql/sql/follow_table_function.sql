-- Put a table on the column-blind capture of ${follow_function}: its row trigger, its UPDATE and
-- its TRUNCATE statement triggers (`triggers`, an SQL list of their names' literals) made anew on
-- that function with `arguments` (an SQL list of literals: see follow_function), unless its
-- capture is off (the row trigger is missing or disabled: then it stays off).
CREATE OR REPLACE FUNCTION ${function}(relation regclass, triggers text, arguments text) RETURNS void
LANGUAGE plpgsql
AS $$${dollar}$$
DECLARE
    _names text[];
BEGIN
    EXECUTE format('SELECT ARRAY[%s]', triggers) INTO _names;
    IF NOT EXISTS (
        SELECT FROM pg_catalog.pg_trigger
        WHERE tgrelid = relation AND tgname = _names[1] AND tgenabled <> 'D'
    ) THEN
        RETURN;
    END IF;
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', _names[1], relation);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', _names[2], relation);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', _names[3], relation);
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION %s(%s)',
                   _names[1], relation, ${follow_function_literal}, arguments);
    EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS %I NEW TABLE AS %I '
                   'FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)',
                   _names[2], relation, ${old_rows_literal}, ${new_rows_literal}, ${follow_function_literal}, arguments);
    EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)',
                   _names[3], relation, ${follow_function_literal}, arguments);
END
$$${dollar}$$
