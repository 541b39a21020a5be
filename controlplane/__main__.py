"""``python -m controlplane``."""

from controlplane.service import main

if __name__ == "__main__":
    main()
