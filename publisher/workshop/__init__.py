"""What measures and stresses the publisher rather than runs it: `publisher bench` (`bench`) and
`publisher soak` (`soak`). Only the command line reaches them; nothing that publishes imports
them (`tests/project/test_layers.py`)."""
