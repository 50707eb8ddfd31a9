"""`python -m optgraph` is the `optgraph` command."""

import sys

from optgraph.cli.main import main

sys.exit(main())
