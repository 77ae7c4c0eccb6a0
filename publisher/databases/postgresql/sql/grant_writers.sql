-- Every role that may write ${table} may log its changes: the capture's triggers run as the
-- writing user and INSERT into ${event_log}, so a writer that may not would have its own
-- statements fail. Each role that may insert, update (a column is enough), delete or truncate
-- the table and may not yet insert into the event log is granted INSERT on it, and only that:
-- PUBLIC first, then the roles that have members, so that a role that inherits the grant gets
-- none of its own. Where the installing user may not grant it, nothing is installed: the error
-- names the roles, since the capture would make every write of theirs fail.
DO $$${dollar}$$
DECLARE
    _role text;
    _refused text[] := '{}';
BEGIN
    FOR _role IN
        SELECT w.name FROM (
            SELECT 'public' AS name, 0 AS rank
            UNION ALL
            SELECT r.rolname, CASE WHEN EXISTS (
                SELECT FROM pg_catalog.pg_auth_members AS m WHERE m.roleid = r.oid) THEN 1 ELSE 2 END
            FROM pg_catalog.pg_roles AS r
            WHERE r.rolname !~ '^pg_'
        ) AS w
        ORDER BY w.rank, w.name
    LOOP
        CONTINUE WHEN NOT (has_any_column_privilege(_role, ${table_name}::regclass, 'INSERT, UPDATE')
                           OR has_table_privilege(_role, ${table_name}::regclass, 'DELETE, TRUNCATE'))
            OR has_table_privilege(_role, ${event_log_name}::regclass, 'INSERT');
        BEGIN
            EXECUTE format('GRANT INSERT ON %s TO %s', ${event_log_name},
                           CASE WHEN _role = 'public' THEN 'PUBLIC' ELSE quote_ident(_role) END);
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;  -- said below, with every role refused
        END;
        IF NOT has_table_privilege(_role, ${event_log_name}::regclass, 'INSERT') THEN
            _refused := _refused || _role;
        END IF;
    END LOOP;
    IF cardinality(_refused) > 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = format('%s may write %s but not log its changes in %s, and %s may not grant INSERT on it',
                             array_to_string(_refused, ', '), ${table_name}, ${event_log_name}, current_user),
            HINT = 'install as the owner of the event log, or grant those roles INSERT on it first: '
                   'with the capture installed, every write of theirs would fail';
    END IF;
END
$$${dollar}$$
