"""`python -m optgraph` is the `optgraph` command."""

import sys

from optgraph.cli import main

sys.exit(main())
