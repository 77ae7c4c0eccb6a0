-- A TRUNCATE fires no row trigger: this one logs, before the rows go, what deleting each would.
CREATE TRIGGER ${trigger} BEFORE TRUNCATE ON ${table}
FOR EACH STATEMENT EXECUTE FUNCTION ${function}()
