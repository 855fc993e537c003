"""``python -m memstack`` runs the command line."""

import sys

from memstack.cli import main

sys.exit(main())
