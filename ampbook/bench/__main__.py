"""``python -m ampbook.bench NAME``: see ``ampbook.bench``."""

import sys

from ampbook.bench import main

sys.exit(main())
