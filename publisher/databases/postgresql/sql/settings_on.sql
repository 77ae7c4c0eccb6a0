-- Unless the changing session's settings already give the table's values the texts query-back
-- reads (${same_text}), keep them in _publisher_settings and put the capture's on, as SET
-- LOCAL: settings_off puts them back before the function returns (see capture/text_settings).
IF NOT (${same_text}) THEN
    _publisher_settings := ARRAY[${current}];
    PERFORM ${set};
END IF;
