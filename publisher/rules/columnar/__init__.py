"""The cycle's rules as column operations over a batch of objects (Arrow), the production form of
the rules that `tests/oracle` states one object at a time.

Entry points: `batch.split_by_query_back`, `batch.simple_operations` and
`batch.query_back_operations` (precedence and operations of a batch), `rows.row_operations` (a
direct snapshot's rows). `precedence` holds precedence as group operations, `logical` the
rules of a logical class's child rows and references.
"""
