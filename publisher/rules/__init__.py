"""The rules of a cycle as pure functions: no I/O, no Spark."""
