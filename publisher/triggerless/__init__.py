"""Triggerless publication: publish a table that carries no trigger by comparing it, bucket by
bucket, with what the previous cycle kept of it.

Entry point: `cycle.run_comparison_cycle(spark, engine, config, reader)`, in `pipeline.cycle.run_cycle`'s
argument order. The rest in pipeline order: `table_scan` and `read` read the table into buckets,
`match` and `buckets` pair them with the kept state (`state`), `rules` and `changes` say what
differs as operations and changes, `children` does so for a logical class's child rows, and
`spark` spreads the buckets over Spark's tasks when the tables are large.
"""
