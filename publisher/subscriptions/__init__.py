"""Subscriptions: readers of the event log beside the status mode, each with a filter of what it
tracks and a window of check-out it publishes.

Entry points: `filter.subscription_filter` (which tables and event types a subscriber tracks),
`tables.subscriber_table` and `tables.checkin_table` (the subscriber state tables in the
database), `bounds.Snapshot` and `bounds.CheckOutWindow` (what a check-out runs between),
`checkout.CheckOutState` (a subscriber's check-out and check-in),
`visibility.visibility_of` (which events a snapshot of the database holds: by record_id, or by
transaction where the database's dialect names a `Visibility` of its own). A subscriber's
cycle is `pipeline.cycle.run_cycle` with its reader; `service.checkouts.check_out` is the
`publisher check-out` command.
"""
