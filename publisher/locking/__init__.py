"""The publisher lock: one publisher at a time per output directory and database.

Entry point: `lock.PublisherLock`; `backends` holds how each database takes the lock.
"""
