-- ${operation}: INSERT, UPDATE or DELETE; ${body}: log_event statements; ${or_replace}: 'OR REPLACE '
-- on MariaDB, which so replaces a trigger with no moment without it. A row trigger: MariaDB
-- and MySQL have no statement triggers. Around its work the trigger puts the session on UTC, so
-- a TIMESTAMP's text is what query-back reads, and then (also when a statement fails) restores
-- the changing session's time_zone.
-- transaction_id is the statement's (see log_event): no transaction id a trigger can read is
-- reliable on MariaDB (information_schema.innodb_trx is a cache refreshed at most every 100 ms,
-- and gave two consecutive transactions one trx_id), so the publisher's window keeps each
-- statement's events together instead, whatever other sessions log in between.
CREATE ${or_replace}TRIGGER ${trigger} AFTER ${operation} ON ${table} FOR EACH ROW
BEGIN
    DECLARE _publisher_time_zone VARCHAR(64) DEFAULT @@session.time_zone;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET time_zone = _publisher_time_zone;
        RESIGNAL;
    END;
    SET time_zone = ${time_zone};
${body}
    SET time_zone = _publisher_time_zone;
END
