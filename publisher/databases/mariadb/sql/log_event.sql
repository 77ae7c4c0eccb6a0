-- One event, logged when ${condition} holds; the perpetrator is the login user, without its host.
-- transaction_id names the statement: its connection and its start time (NOW() in a trigger is
-- the triggering statement's, and the trigger has set time_zone to UTC). A transaction of
-- several statements logs several ids; two statements of one connection in one microsecond
-- share one, which only makes the publisher's window take more rows together.
IF ${condition} THEN
    INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value}, ${transaction_id})
    VALUES ('N', ${type_sql}, SUBSTRING_INDEX(USER(), '@', 1), ${table_name_sql}, ${key_sql}, ${column_sql}, ${old_sql}, ${new_sql}, CONCAT(CONNECTION_ID(), '@', NOW(6)));
END IF;
