-- The publisher's poll reads status 'N' rows in record_id order.
CREATE INDEX IF NOT EXISTS ${index} ON ${event_log} (${status}, ${record_id})
