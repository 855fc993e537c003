"""The repository checkout, for what ships only there: the script benchmarks and recipes.

    >>> from memstack.bench.checkout import find_checkout
    >>> root = find_checkout()
    >>> root is None or (root / "benchmarks" / "bench_window.py").is_file()
    True

The package ships the library, the CLI and ``memstack bench tokens``. The script
benchmarks (``memstack bench overhead|scale|load|window|encrypted|ttl``) measure the
shipped recipes on the shared data, so they run from a checkout: the one this package was
installed from in editable mode, or the one the current directory is in.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHECKOUT_HINT", "find_checkout"]

CHECKOUT_HINT = (
    "run it inside a checkout of the memstack repository (git clone, then cd into it); "
    "the installed package ships only `memstack bench tokens`"
)


def _is_checkout(root: Path) -> bool:
    return (root / "benchmarks" / "bench_window.py").is_file() and (root / "recipes").is_dir()


def find_checkout(cwd: Path | None = None) -> Path | None:
    """The checkout beside this package (editable install), else around ``cwd``; or None."""
    here = (cwd or Path.cwd()).resolve()
    for root in (Path(__file__).resolve().parents[2], here, *here.parents):
        if _is_checkout(root):
            return root
    return None
