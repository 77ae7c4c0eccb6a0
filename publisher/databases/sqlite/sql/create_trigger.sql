-- ${operation}: INSERT, UPDATE or DELETE; ${body}: log_event statements.
CREATE TRIGGER ${trigger} AFTER ${operation} ON ${table} FOR EACH ROW
BEGIN
${body}
END
