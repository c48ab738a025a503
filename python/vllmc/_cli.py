"""_cli.py - the `vllmc` console script: execs the vllmc binary built with the package."""
import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "vllmc")
    if not os.access(exe, os.X_OK):
        sys.exit(f"vllmc: {exe}: not found (the package was built without the command)")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
