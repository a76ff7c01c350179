"""``python -m ampbook.doctor``: Will AMP help your model (chapter 6).

The command's name only: it is ``ampbook.predict.doctor``, at its layer of the library
(DEVELOPING.md, "Layout"). Nothing in ``ampbook`` imports this module.
"""

import sys

from ampbook.predict.doctor import main

if __name__ == "__main__":
    sys.exit(main())
