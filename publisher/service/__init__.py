"""What runs around the cycle: the polling loop, the lock, stats, the demo and the mirror."""
