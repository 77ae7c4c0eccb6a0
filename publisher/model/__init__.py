"""The project's vocabulary: event log rows, keys, column values and the catalog of published tables."""
