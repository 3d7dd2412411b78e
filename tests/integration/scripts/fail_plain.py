"""A script that raises, for comparing the bootstrap's failure output with ``python SCRIPT``'s."""


def main() -> None:
    raise ValueError("injected failure")


main()
