-- One event, logged when ${condition} holds; the perpetrator is the login user, without its host.
IF ${condition} THEN
    INSERT INTO ${event_log} (${status}, ${event_type}, ${perpetrator}, ${table_name}, ${table_key}, ${column_name}, ${old_value}, ${new_value}, ${transaction_id})
    VALUES ('N', ${type_sql}, SUBSTRING_INDEX(USER(), '@', 1), ${table_name_sql}, ${key_sql}, ${column_sql}, ${old_sql}, ${new_sql}, NULL);
END IF;
