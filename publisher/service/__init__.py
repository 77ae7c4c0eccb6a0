"""What runs around the cycle: the polling loop, stats and metrics, the demo, migrations, repair
and the consumer mirror (`publisher verify`)."""
