DROP TRIGGER IF EXISTS ${trigger} ON ${table}
