"""``python -m kvbudget`` entry point."""

from kvbudget.cli.main import main

if __name__ == "__main__":
    main()
