"""``python -m mmaplug``: the ``mmaplug`` command."""

import sys

from mmaplug.cli.main import main

sys.exit(main())
