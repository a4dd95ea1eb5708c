"""``python -m traceviz_client send FILE.ndjson --url URL --token TOKEN``."""

import sys

from traceviz_client import main

sys.exit(main())
