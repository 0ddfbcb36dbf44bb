"""The `roofline` command line: one thin function per subcommand (parse -> calc -> render).

Counting conventions (also in README): a multiply-add is 2 FLOPs; linear FLOPs
are the weight matmuls; attention FLOPs are QK^T and PV over the positions a
query may see (causal in prefill); everything else is "other". GB = 1e9 bytes.

Each command group lives in its own module and registers on ``calc.cli.base.app``;
importing them here puts them on the app in the order ``--help`` lists them.
"""

# ruff: noqa: I001  (the import order is the order --help lists the commands)
from __future__ import annotations

import sys

from calc.cli import catalog, estimate, plan, compare, sweep  # noqa: F401  (registered in this order)
from calc.cli.base import app
import validate.cli  # noqa: F401  (validate, calibrate, validate-comm; torch only inside them)

__all__ = ["app", "main"]


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
