"""``python -m attnkit``: the attnkit command line, as ``attnkit``."""

import sys

from attnkit.cli.main import console_main

sys.exit(console_main())
