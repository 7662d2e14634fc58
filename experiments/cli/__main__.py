"""`python -m msprlab.experiments.cli ...`: the `msprlab` command."""

import sys

from .parser import main

sys.exit(main())
