"""`python -m gelulab`: the command line (gelulab.cli)."""
import sys

from gelulab.cli import main

sys.exit(main())
