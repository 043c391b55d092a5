"""``python -m simscale.cli``: the ``simscale`` command without its console script."""

import sys

from simscale.cli import main

sys.exit(main())
