"""``python -m ampbook.train``: see ``ampbook.train``."""

import sys

from ampbook.train.command import main

sys.exit(main())
