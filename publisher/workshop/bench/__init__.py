"""`publisher bench`: drain a generated backlog and compare it with the floor and a one-at-a-time publisher.

`workload` makes the backlog through the real triggers, `floor` times what the database itself
needs to read and mark it, `reference` publishes a sample one event at a time as the vendor
product does, and `run` drains the backlog with the real publisher and reports.
"""
