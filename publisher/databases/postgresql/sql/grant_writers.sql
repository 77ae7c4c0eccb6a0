-- Every role that may write ${table} may log its changes: the capture's triggers run as the
-- writing user and INSERT into ${event_log}, so a writer that may not would have its own
-- statements fail. Installed by the table's owner, the event log is the owner's own and nothing
-- is granted; installed by another user (a superuser, say), each role that may write the table
-- now gets INSERT on the event log, and only that. A user that may not grant (the publisher's,
-- remaking a capture after a migration) leaves it to the owner's next `install`, with a warning.
DO $$$$
DECLARE
    _role name;
BEGIN
    FOR _role IN
        SELECT r.rolname FROM pg_catalog.pg_roles AS r
        WHERE r.rolname !~ '^pg_'
          AND has_table_privilege(r.oid, ${table_name}::regclass, 'INSERT, UPDATE, DELETE, TRUNCATE')
          AND NOT has_table_privilege(r.oid, ${event_log_name}::regclass, 'INSERT')
        ORDER BY r.rolname
    LOOP
        BEGIN
            EXECUTE format('GRANT INSERT ON %s TO %I', ${event_log_name}, _role);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'role % may write % but not log its changes in %: grant it INSERT on the event log',
                _role, ${table_name}, ${event_log_name};
        END;
    END LOOP;
END
$$$$
