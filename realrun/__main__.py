"""``python -m realrun run SCENARIO ...``, the same as the ``realrun`` console script."""

import sys

from realrun.cli import main

sys.exit(main())
