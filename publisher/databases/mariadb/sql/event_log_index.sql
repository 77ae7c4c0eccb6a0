-- The publisher's poll reads status 'N' rows in record_id order. MySQL has no CREATE INDEX IF
-- NOT EXISTS: install leaves this statement out where the index is there already.
CREATE INDEX ${index} ON ${event_log} (${status}, ${record_id})
