-- The changing session's settings back, where settings_on changed them.
IF _publisher_settings IS NOT NULL THEN
    PERFORM ${restore};
END IF;
