"""The data and metadata messages: JSON lines per cycle, and the broker they go to.

Entry points: `cycle.MessagesFormat` (the messages as a change format), `build` (a table
version's metadata message and a change's data message), `broker.publish_file` (a cycle's file
sent to the broker before the cycle acknowledges).
"""
