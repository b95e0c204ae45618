"""`python -m dra_driver.cli`: the same entry point as the `dra-driver` console script."""

import sys

from dra_driver.cli import main

sys.exit(main())
