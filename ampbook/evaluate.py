"""``python -m ampbook.evaluate``: Cityscapes predictions scored as the official
evaluation does.

The command's name only: it is ``ampbook.segmentation.evaluate``, at its layer of the
library (DEVELOPING.md, "Layout"). Nothing in ``ampbook`` imports this module.
"""

import sys

from ampbook.segmentation.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
