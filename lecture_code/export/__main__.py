"""``python -m lecture_code.export``: see :mod:`lecture_code.export.cli`."""

from lecture_code.export.cli import main

if __name__ == "__main__":
    main()
