"""``python -m ampbook.train``: see ``ampbook.train``."""

import sys

from ampbook.train.loop import main

sys.exit(main())
