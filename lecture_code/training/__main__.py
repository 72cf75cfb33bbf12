"""``python -m lecture_code.training``: see :mod:`lecture_code.training.cli`."""

from lecture_code.training.cli import main

if __name__ == "__main__":
    main()
