"""Run one mode of the pods' programs: `python <archive> <mode> ...` (function/builders/identity.py ships it).

The archive's own __main__.py: `publish`, `rekey` and `registrar` are
identity_program's modes, `runner` is run_program's, `bundle` is
bundle_program's, `gather` is gather_program's. Only the program a mode needs is imported.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """Hand argv to the program whose mode it names."""
    if argv[:1] == ["runner"]:
        from function.programs import run_program  # noqa: PLC0415 - only the program the mode runs

        return run_program.main(argv)
    if argv[:1] == ["bundle"]:
        from function.programs import bundle_program  # noqa: PLC0415 - only the program the mode runs

        return bundle_program.main(argv)
    if argv[:1] == ["gather"]:
        from function.programs import gather_program  # noqa: PLC0415 - only the program the mode runs

        return gather_program.main(argv)
    from function.programs import identity_program  # noqa: PLC0415 - only the program the mode runs

    return identity_program.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
