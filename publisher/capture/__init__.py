"""The capture side: the event log table and the triggers that fill it."""
