-- The publisher's poll reads status 'N' rows in record_id order. Only those rows are indexed: a
-- row's acknowledgement (its status changes from 'N') then writes no entry into this index, and
-- the index stays as small as the backlog however much of the log is kept.
CREATE INDEX IF NOT EXISTS ${index} ON ${event_log} (${record_id}) WHERE ${status} = 'N'
