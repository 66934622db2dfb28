"""``python -m adminctl``."""

from adminctl.cli import main

if __name__ == "__main__":
    main()
