"""``python -m lenpred``: the CLI without its console script (a machine where the package is on PYTHONPATH but not
installed, e.g. a lent GPU with no network)."""

import sys

from lenpred.cli import main

sys.exit(main())
