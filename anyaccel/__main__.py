"""``python -m anyaccel`` runs the command line (see `anyaccel.cli`)."""

import sys

from anyaccel.cli import main

sys.exit(main())
