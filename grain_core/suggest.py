"""Did-you-mean hints for misspelled names (plugins, sources, transforms, dataset factories).

Contract: :func:`did_you_mean` returns ``" Did you mean 'X'?"`` for the candidate closest to a
misspelled name, by :func:`difflib.get_close_matches` ignoring case, and ``""`` when none is close; it is appended to an error message as is. Private names (leading ``_``)
are never suggested.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_matches", "did_you_mean"]

_CUTOFF = 0.75


def close_matches(name: str, candidates: Iterable[str], n: int = 2) -> list[str]:
    """Up to ``n`` public ``candidates`` closest to ``name`` (case-insensitive), best first."""
    public = sorted({c for c in candidates if c and not c.startswith("_") and c != name})
    by_folded: dict[str, str] = {}
    for c in public:
        by_folded.setdefault(c.casefold(), c)
    found = difflib.get_close_matches(name.casefold(), list(by_folded), n=n, cutoff=_CUTOFF)
    return [by_folded[f] for f in found]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``" Did you mean 'X'?"`` for the closest candidate, ``""`` when none is close."""
    found = close_matches(name, candidates, n=1)
    return f" Did you mean {found[0]!r}?" if found else ""
