-- Event triggers have no OR REPLACE: drop_event_trigger runs first.
CREATE EVENT TRIGGER ${trigger} ON ddl_command_end WHEN TAG IN ('ALTER TABLE')
EXECUTE FUNCTION ${function}()
