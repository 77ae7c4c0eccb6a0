"""One polling cycle: its window, the stages on either path, and the acknowledgement."""
