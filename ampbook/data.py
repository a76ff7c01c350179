"""``python -m ampbook.data``: a synthetic Cityscapes, or the pairs of a real one.

The command's name only: it is ``ampbook.segmentation.data_command``, at its layer of
the library (DEVELOPING.md, "Layout"). Nothing in ``ampbook`` imports this module.
"""

import sys

from ampbook.segmentation.data_command import main

if __name__ == "__main__":
    sys.exit(main())
