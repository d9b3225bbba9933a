"""`python -m app.cli`: the same as the `recalld` script."""

import sys

from app.cli import main

sys.exit(main())
