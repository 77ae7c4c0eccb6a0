"""`python -m publisher.cli`: the `publisher` command."""
import sys

from publisher.cli import main

sys.exit(main())
