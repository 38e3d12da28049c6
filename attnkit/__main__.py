"""``python -m attnkit``: the attnkit command line, as ``attnkit``."""

import sys

from attnkit.cli.main import main

sys.exit(main())
