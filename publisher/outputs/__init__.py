"""What a cycle writes: XDS documents, change tables, messages, and the broker they go to."""
