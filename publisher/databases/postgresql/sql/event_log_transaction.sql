-- An event log created before the transaction_id column existed gets it: the triggers write it.
ALTER TABLE ${event_log} ADD COLUMN IF NOT EXISTS ${transaction_id} varchar(64)
