"""`publisher soak`: concurrent writers, a publisher killed and restarted, the database restarted,
then a drain and `verify` for every reader.

Each database starts a private server of its own (`Workbench.soak_server`, so a restart disturbs
no one else); `schema` creates
the tables and the configuration, `writers` makes random changes from several threads,
`process` starts, kills and measures `publisher run`, and `run` ties them together per database
and reports.
"""
