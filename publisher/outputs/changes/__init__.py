"""The change formats: the `ChangeFormat` protocol every format beside XDS follows, and the
change tables.

Entry points: `format.ChangeFormat` (whether a format is on, how its cycle starts, stages and
commits), `cycle.ChangeTablesFormat` (the change tables as a format), `tables` (their rows and
files).
"""
