"""``python -m lecture_code.lecture [--small] [--skip STEP …]``: the main job (``make lecture``)."""

import sys

from lecture_code.lecture.job import main

sys.exit(main())
