"""How records are split between processes: ``ShardOptions``, ``NoSharding``, ``ShardByJaxProcess``.

Sharding is contiguous: shard ``i`` of ``n`` reads the records ``[start, end)`` given by
:func:`shard_bounds`. Without ``drop_remainder`` the first ``num_records % n`` shards hold one record
more than the others; with it every shard holds ``num_records // n`` records and the rest are never
read.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import sys

from grain_core.validation import check_int

__all__ = ["NoSharding", "ShardByJaxProcess", "ShardOptions", "shard_bounds", "stream_positions"]

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ShardOptions:
    """This process reads shard ``shard_index`` of ``shard_count``.

    Attributes:
      shard_index: which shard, in ``[0, shard_count)``.
      shard_count: how many shards the records are split into.
      drop_remainder: give every shard exactly ``num_records // shard_count`` records (the
        remainder is not read), so all processes take the same number of steps.
    """

    shard_index: int
    shard_count: int
    drop_remainder: bool = False

    def __post_init__(self):
        owner = type(self).__name__
        index = check_int(self.shard_index, f"{owner}.shard_index", minimum=None)
        count = check_int(self.shard_count, f"{owner}.shard_count", minimum=None)
        if count <= 0:  # Grain's wording first
            raise ValueError(
                f"Number of shards must be a positive integer but got {count} "
                f"({owner}.shard_count must be positive, got {count})."
            )
        if not 0 <= index < count:
            raise ValueError(
                f"Shard shard_index must be in [0, shard_count - 1], shard_count was {count} and "
                f"shard_index was {index} ({owner}.shard_index must be in [0, shard_count={count}), "
                f"got {index})."
            )
        object.__setattr__(self, "shard_index", index)
        object.__setattr__(self, "shard_count", count)
        object.__setattr__(self, "drop_remainder", bool(self.drop_remainder))

    def bounds(self, num_records: int) -> tuple[int, int]:
        """The ``[start, end)`` record range of this shard out of ``num_records``. With
        ``drop_remainder`` and records left over, logs Grain's warning ``"Dropping N examples of M
        examples (shard i)."`` (logger ``grain_core.sharding``)."""
        bounds = shard_bounds(num_records, self.shard_index, self.shard_count, self.drop_remainder)
        unused = num_records % self.shard_count
        if self.drop_remainder and unused:  # logged, as Grain's even_split does
            _log.warning(
                "Dropping %d examples of %d examples (shard %d).",
                unused,
                num_records,
                self.shard_index,
            )
        return bounds


class NoSharding(ShardOptions):
    """Every process reads all records (a single shard)."""

    def __init__(self):
        super().__init__(shard_index=0, shard_count=1, drop_remainder=False)

    def __repr__(self) -> str:
        # Grain's repr: it is part of every DataLoader state (the sampler's repr is checked).
        return "NoSharding(shard_index=0, shard_count=1, drop_remainder=False)"


class ShardByJaxProcess(ShardOptions):
    """One shard per JAX process: ``jax.process_index()`` of ``jax.process_count()``."""

    def __init__(self, drop_remainder: bool = False):
        try:
            import jax
        except ImportError as e:
            raise ImportError(
                "ShardByJaxProcess reads jax.process_index() and jax.process_count(), but jax is "
                "not installed. Install it with `pip install jax` (or `pip install "
                "grain-core-kernel[jax]`), or pass ShardOptions(shard_index, shard_count) yourself."
            ) from e
        super().__init__(
            shard_index=jax.process_index(),
            shard_count=jax.process_count(),
            drop_remainder=drop_remainder,
        )

    def __repr__(self) -> str:
        return f"ShardByJaxProcess(drop_remainder={self.drop_remainder})"


def shard_bounds(
    num_records: int, shard_index: int, shard_count: int, drop_remainder: bool = False
) -> tuple[int, int]:
    """Returns ``(start, end)``: the contiguous records of shard ``shard_index`` of ``shard_count``.

    The shards are disjoint and, without ``drop_remainder``, cover ``[0, num_records)``; their sizes
    differ by at most one. With ``drop_remainder`` every shard has ``num_records // shard_count``.
    """
    num_records = operator.index(num_records)
    if num_records < 0:
        raise ValueError(f"num_records must be >= 0, got {num_records}.")
    if shard_count <= 0 or not 0 <= shard_index < shard_count:
        raise ValueError(
            f"shard_index must be in [0, shard_count) with shard_count > 0, got "
            f"shard_index={shard_index}, shard_count={shard_count}."
        )
    size, extra = divmod(num_records, shard_count)
    if drop_remainder:
        start = shard_index * size
        return start, start + size
    start = shard_index * size + min(shard_index, extra)
    return start, start + size + (1 if shard_index < extra else 0)


def stream_positions(
    total: int, shard_index: int, shard_count: int, grain_exact: bool, drop_remainder: bool = False
) -> int:
    """How many of the positions ``shard_index, shard_index + shard_count, ...`` below ``total``
    (a sampler's length) the ``DataLoader`` of shard ``shard_index`` reads.

    All of them, unless ``grain_exact``: then ``total // shard_count``, as Grain 0.2.18 does, so a
    shard whose positions do not divide evenly leaves its last one unread. ``drop_remainder``
    (every shard reads as many) and an infinite ``total`` (``sys.maxsize``) give Grain's count in
    both modes.
    """
    if grain_exact or drop_remainder or total >= sys.maxsize:
        return total // shard_count
    return max(0, -(-(total - shard_index) // shard_count))
