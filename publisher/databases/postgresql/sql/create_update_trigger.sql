-- Updates are logged once per statement, from its transition tables: all the rows it changed,
-- as they were (${old_rows}) and as they are (${new_rows}); see update_function.
CREATE TRIGGER ${trigger} AFTER UPDATE ON ${table}
REFERENCING OLD TABLE AS ${old_rows} NEW TABLE AS ${new_rows}
FOR EACH STATEMENT EXECUTE FUNCTION ${function}()
