"""``python -m ampbook.calibration``: the cost model against published step times
(chapter 6).

The command's name only: it is ``ampbook.predict.calibrate``, at its layer of the
library (DEVELOPING.md, "Layout"). Nothing in ``ampbook`` imports this module.
"""

import sys

from ampbook.predict.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
