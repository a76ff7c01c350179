"""``python -m ampbook.gpucheck``: everything the book measures on a CUDA machine, in
one call.

The command's name only: it is ``ampbook.build.gpucheck``, at its layer of the library
(DEVELOPING.md, "Layout"). Nothing in ``ampbook`` imports this module.
"""

import sys

from ampbook.build.gpucheck import main

if __name__ == "__main__":
    sys.exit(main())
