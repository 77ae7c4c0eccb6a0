-- Inserts and deletes are logged row by row; updates by the statement (create_update_trigger).
CREATE TRIGGER ${trigger} AFTER INSERT OR DELETE ON ${table}
FOR EACH ROW EXECUTE FUNCTION ${function}()
