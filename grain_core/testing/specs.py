"""Element-spec check of the conformance kit.

:func:`check_element_spec` builds the pipeline, asks ``grain_core.experimental.get_element_spec``
for its spec (which reads no data) and then reads its first elements: each must have the spec's
structure, and each leaf the spec's rank, dimensions (``None`` matches any size) and dtype. A stage
that cannot say its spec raises ``NotImplementedError`` (or ``ValueError`` for a transform without
``output_spec``, as in Grain); with ``required=True`` that fails the check, otherwise the check
passes without reading (``check_stage`` runs it that way, so a stage whose input has no spec, e.g.
``MapDataset.source(list)``, still conforms).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from grain_core import tree

__all__ = ["check_element_spec", "element_matches_spec"]


def _iterate(ds: Any) -> Any:
    from grain_core.dataset.base import MapDataset

    return iter(ds.to_iter_dataset() if isinstance(ds, MapDataset) else ds)


def element_matches_spec(element: Any, spec: Any) -> str | None:
    """``None`` if ``element`` fits ``spec`` (structure, rank, sizes, dtypes), else what differs."""
    want = tree.flatten_with_paths(spec)
    got = tree.flatten_with_paths(element)
    if [p for p, _ in want] != [p for p, _ in got]:
        return (
            f"structure: spec has leaves {[p for p, _ in want]}, element has {[p for p, _ in got]}"
        )
    for (path, leaf_spec), (_, leaf) in zip(want, got):
        shape = tuple(leaf_spec.shape)
        actual = np.shape(leaf)
        if len(shape) != len(actual) or any(
            s is not None and s != a for s, a in zip(shape, actual)
        ):
            return f"leaf {path}: spec shape {shape}, element shape {actual}"
        dtype = np.dtype(leaf_spec.dtype)
        if dtype != np.dtype(object) and np.asarray(leaf).dtype != dtype:
            return f"leaf {path}: spec dtype {dtype}, element dtype {np.asarray(leaf).dtype}"
    return None


def check_element_spec(
    make_dataset: Callable[[], Any], *, required: bool = False, count: int = 4
) -> bool:
    """Checks that the first ``count`` elements of ``make_dataset()`` fit its element spec.

    Returns ``True`` when a spec was checked, ``False`` when the pipeline gives none and
    ``required`` is false. Raises ``AssertionError`` naming the element and leaf that differ, or
    (``required``) saying the stage gives no spec.
    """
    from grain_core.element_spec import get_element_spec

    ds = make_dataset()
    try:
        spec = get_element_spec(ds)
    except (NotImplementedError, ValueError) as e:
        if required:
            raise AssertionError(
                f"{type(ds).__name__} gives no element spec ({type(e).__name__}: {e}). Define "
                "`_element_spec` on the stage (see docs/writing-plugins.md)."
            ) from e
        return False
    it = _iterate(ds)
    try:
        for i in range(count):
            try:
                element = next(it)
            except StopIteration:
                break
            problem = element_matches_spec(element, spec)
            if problem is not None:
                raise AssertionError(
                    f"element {i} of {type(ds).__name__} does not fit its element spec: {problem}."
                )
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    return True
