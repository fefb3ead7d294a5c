"""Feature bookkeeping shared by the packers: flattening PyTrees against ``length_struct``,
validating elements and assembling outputs with ``_segment_ids`` / ``_positions`` features."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

import grain_core as grain
from grain_core.author import check_int

Path = tuple[Any, ...]


def flatten(tree: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """``(path, leaf)`` pairs of a PyTree of dicts, lists and tuples (dict keys sorted)."""
    if isinstance(tree, Mapping):
        out: list[tuple[Path, Any]] = []
        for k in sorted(tree, key=str):
            out += flatten(tree[k], (*path, k))
        return out
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        out = []
        for i, v in enumerate(tree):
            out += flatten(v, (*path, i))
        return out
    return [(path, tree)]


def path_name(path: Path) -> str:
    return "/".join(str(p) for p in path) or "<root>"


def _positive(value: Any, where: str) -> int:
    return check_int(value, where, minimum=1)


class FeatureSpec:
    """The packed features: paths, target lengths, padding values and which ones are meta."""

    def __init__(
        self,
        owner: str,
        length_struct: Any,
        meta_features: Collection[str] = (),
        padding_struct: Any = None,
        drop_extra: bool = False,
    ):
        self.owner = owner
        self.drop_extra = drop_extra
        if length_struct is None:
            raise TypeError(f"{owner}: length_struct is required.")
        leaves = flatten(length_struct)
        if not leaves:
            raise ValueError(f"{owner}: length_struct has no features.")
        self.paths = [p for p, _ in leaves]
        self._known = set(self.paths)
        self.lengths = np.array(
            [_positive(v, f"{owner}: length_struct[{path_name(p)}]") for p, v in leaves],
            dtype=np.int64,
        )
        meta = set(meta_features)
        # A meta feature names a leaf (its key or its "a/b" path) or, as in Grain, a nested
        # feature (a dict such as {"inner": ...}): every leaf under it is meta then.
        names = {k for p in self.paths for k in p} | {
            path_name(p[:i]) for p in self.paths for i in range(1, len(p) + 1)
        }
        unknown = sorted((m for m in meta if m not in names), key=str)
        # The bin packers, as Grain's, keep a meta feature length_struct does not name (an image,
        # say) as the list of the packed examples' values ("non-sequence" meta features).
        dict_out = isinstance(length_struct, Mapping) and all(
            p and isinstance(p[-1], str) for p in self.paths
        )
        self.extra_meta = unknown if drop_extra and dict_out else []
        if unknown and not self.extra_meta:
            raise ValueError(
                f"{owner}: meta_features {[str(m) for m in unknown]} are not features of "
                "length_struct."
            )
        self.meta = [
            bool(p) and any(k in meta or path_name(p[: i + 1]) in meta for i, k in enumerate(p))
            for p in self.paths
        ]
        self.pads: list[Any] = self.per_feature(padding_struct, "padding_struct", 0)
        # Outputs keep dicts and add sibling keys when every packed leaf sits in a dict.
        self.sibling_keys = all(p and isinstance(p[-1], str) for p in self.paths)
        self.template = length_struct
        self.trailing: list[tuple[int, ...]] | None = None
        self.dtypes: list[np.dtype] | None = None
        flat = isinstance(length_struct, dict) and all(len(p) == 1 for p in self.paths)
        self._flat_keys = [p[0] for p in self.paths] if flat else None

    def per_feature(self, struct: Any, what: str, default: Any) -> list[Any]:
        """``struct``'s leaves in ``self.paths`` order (``default`` where a feature is left out or
        None); a leaf that is not a feature of ``length_struct`` raises ``ValueError``."""
        if struct is None:
            return [default] * len(self.paths)
        leaves = dict(flatten(struct))
        known = set(self.paths)
        extra = sorted(path_name(p) for p in leaves if p not in known)
        if extra:
            raise ValueError(f"{self.owner}: {what} has features {extra} not in length_struct.")
        return [default if leaves.get(p) is None else leaves[p] for p in self.paths]

    def index(self, name: Any, what: str) -> int:
        """Index of the feature called ``name`` (its key or its ``a/b`` path); ``ValueError`` if
        there is none or the name is ambiguous."""
        hits = [
            i for i, p in enumerate(self.paths) if (p and p[-1] == name) or path_name(p) == name
        ]
        if len(hits) != 1:
            known = [path_name(p) for p in self.paths]
            problem = "is not a feature of" if not hits else "names several features of"
            raise ValueError(f"{self.owner}: {what} {name!r} {problem} length_struct {known}.")
        return hits[0]

    def arrays(self, element: Any) -> list[Any]:
        """The element's feature arrays in ``self.paths`` order; raises on a mismatch. With
        non-sequence meta features (``extra_meta``) a dict of their values follows the arrays.

        With ``drop_extra`` (the bin packers, as in Grain) features that ``length_struct`` does not
        name are dropped; otherwise (``ConcatThenSplitIterDataset``, as in Grain) they raise
        ``ValueError``, as does a feature that ``length_struct`` names but the element lacks.
        """
        if self.extra_meta:
            if not isinstance(element, Mapping) or any(k not in element for k in self.extra_meta):
                missing = [
                    str(k)
                    for k in self.extra_meta
                    if not isinstance(element, Mapping) or k not in element
                ]
                raise ValueError(
                    f"{self.owner}: meta_features {missing} are neither features of length_struct "
                    "nor keys of the element."
                )
            extras = {k: element[k] for k in self.extra_meta}
            return [*self._arrays(element), extras]
        return self._arrays(element)

    def _arrays(self, element: Any) -> list[np.ndarray]:
        if self.trailing is not None and self._flat_keys and type(element) is dict:
            # Fast path: a flat dict of arrays like the earlier elements' (other keys dropped with ``drop_extra``).
            if len(element) == len(self._flat_keys) or (
                self.drop_extra and len(element) > len(self._flat_keys)
            ):
                out = [element.get(k) for k in self._flat_keys]
                if all(
                    type(a) is np.ndarray and a.ndim and a.dtype == dt and a.shape[1:] == t
                    for a, t, dt in zip(out, self.trailing, self.dtypes)
                ):
                    return out
        leaves = _flatten_like(element, self.template)
        if self.drop_extra:
            leaves = [(p, leaf) for p, leaf in leaves if p in self._known]
        got = [p for p, _ in leaves]
        if got != self.paths:
            want = set(self.paths)
            have = set(got)
            missing = sorted(path_name(p) for p in want - have)
            extra = sorted(path_name(p) for p in have - want)
            grain_phrase = (
                ""
                if self.drop_extra
                else f"Parent element has structure {sorted(map(path_name, got))} but target "
                f"sequence length is {self.template}. There must be a sequence length for each "
                "feature. "
            )
            raise ValueError(
                f"{grain_phrase}{self.owner}: element features do not match length_struct: "
                f"missing {missing}, not in length_struct {extra}."
            )
        out = []
        for p, leaf in leaves:
            try:
                a = np.asarray(leaf)
            except ValueError as e:
                raise ValueError(f"{self.owner}: feature {path_name(p)!r} is ragged: {e}") from None
            if a.dtype == object:
                raise ValueError(
                    f"{self.owner}: feature {path_name(p)!r} is ragged or not numeric (dtype object)."
                )
            if a.ndim == 0:  # as in Grain: a scalar is a sequence of length 1
                a = a.reshape(1)
            out.append(a)
        if self.trailing is None:
            trailing = [a.shape[1:] for a in out]
            dtypes = [a.dtype for a in out]
            # Both at once (no call between the stores): Ctrl-C in a comprehension above must not
            # leave ``trailing`` set without ``dtypes``.
            self.trailing, self.dtypes = trailing, dtypes
        else:
            for p, a, t, dt in zip(self.paths, out, self.trailing, self.dtypes):
                if a.shape[1:] != t:
                    raise ValueError(
                        f"{self.owner}: feature {path_name(p)!r} has trailing shape {a.shape[1:]}, "
                        f"earlier elements had {t}."
                    )
                if a.dtype != dt and not np.can_cast(a.dtype, dt, "same_kind"):
                    raise ValueError(
                        f"{self.owner}: feature {path_name(p)!r} has dtype {a.dtype}, but earlier "
                        f"elements had {dt}; packing it would change its values. Cast it upstream."
                    )
        return out

    def empty_rows(self, rows: int) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """Fresh ``(data, segment_ids, positions)`` buffers for ``rows`` packed rows."""
        assert self.trailing is not None and self.dtypes is not None
        data, seg, pos = [], [], []
        for t, n, pad, dt in zip(self.trailing, self.lengths.tolist(), self.pads, self.dtypes):
            data.append(np.full((rows, n, *t), pad, dtype=dt))
            seg.append(np.zeros((rows, n), dtype=np.int32))
            pos.append(np.zeros((rows, n), dtype=np.int32))
        return data, seg, pos

    def assemble(
        self,
        data: list[np.ndarray],
        seg: list[np.ndarray],
        pos: list[np.ndarray],
        extras: list[dict[str, Any]] | None = None,
    ) -> Any:
        """The output PyTree of one packed row (``extras``: the non-sequence meta features of the
        row's examples, in packing order, each kept as the list of their values)."""
        out = self._assemble(data, seg, pos)
        for k in self.extra_meta:
            out[k] = [e[k] for e in extras or ()]
        return out

    def _assemble(
        self, data: list[np.ndarray], seg: list[np.ndarray], pos: list[np.ndarray]
    ) -> Any:
        if self.sibling_keys:
            out = _copy_structure(self.template)
            for p, meta, d, s, q in zip(self.paths, self.meta, data, seg, pos):
                parent = out
                for k in p[:-1]:
                    parent = parent[k]
                parent[p[-1]] = d
                if not meta:
                    parent[f"{p[-1]}_segment_ids"] = s
                    parent[f"{p[-1]}_positions"] = q
            return out
        return (
            _fill(self.template, self.paths, data),
            _fill(self.template, self.paths, seg),
            _fill(self.template, self.paths, pos),
        )


def _flatten_like(tree: Any, template: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """Flattens ``tree`` down to the leaves of ``template`` (a leaf there takes a whole subtree)."""
    if isinstance(template, Mapping) or (
        isinstance(template, (list, tuple)) and not hasattr(template, "_fields")
    ):
        if isinstance(template, Mapping) != isinstance(tree, Mapping) or not isinstance(
            tree, (Mapping, list, tuple)
        ):
            return flatten(tree, path)
        return _flatten_children(tree, template, path)
    return [(path, tree)]


def _flatten_children(tree: Any, template: Any, path: Path) -> list[tuple[Path, Any]]:
    out: list[tuple[Path, Any]] = []
    if isinstance(tree, Mapping):
        for k in sorted(tree, key=str):
            if k in template:
                out += _flatten_like(tree[k], template[k], (*path, k))
            else:
                out += flatten(tree[k], (*path, k))
        return out
    for i, v in enumerate(tree):
        if i < len(template):
            out += _flatten_like(v, template[i], (*path, i))
        else:
            out += flatten(v, (*path, i))
    return out


def _copy_structure(tree: Any) -> Any:
    if isinstance(tree, Mapping):
        return {k: _copy_structure(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_copy_structure(v) for v in tree]
    return None


def _fill(template: Any, paths: list[Path], values: list[Any]) -> Any:
    lookup = dict(zip(paths, values))

    def build(t: Any, path: Path) -> Any:
        if isinstance(t, Mapping):
            return {k: build(v, (*path, k)) for k, v in t.items()}
        if isinstance(t, (list, tuple)) and not hasattr(t, "_fields"):
            return type(t)(build(v, (*path, i)) for i, v in enumerate(t))
        return lookup[path]

    return build(template, ())


def packed_spec(spec: FeatureSpec, parent_spec: Any) -> Any:
    """The element spec of packed rows (``get_element_spec``) from the parent's element spec: each
    feature ``(L, *trailing)`` with its dtype, ``_segment_ids`` / ``_positions`` ``(L,)`` int32, in
    the structure :meth:`FeatureSpec.assemble` builds; features ``length_struct`` does not name
    are dropped by the bin packers and refused by ``ConcatThenSplitIterDataset`` (as when
    reading)."""
    struct = grain.experimental.ShapeDtypeStruct
    if spec.extra_meta:
        raise NotImplementedError(
            f"{spec.owner}: element spec inference is not implemented with non-sequence "
            f"meta_features {spec.extra_meta} (lists of as many values as examples packed)."
        )
    leaves = _flatten_like(parent_spec, spec.template)
    if spec.drop_extra:
        leaves = [(p, leaf) for p, leaf in leaves if p in spec._known]
    if [p for p, _ in leaves] != spec.paths:
        raise ValueError(
            f"{spec.owner}: the parent's element spec has features "
            f"{sorted(path_name(p) for p, _ in leaves)}, length_struct "
            f"{sorted(path_name(p) for p in spec.paths)}."
        )
    data, seg, pos = [], [], []
    for (_, leaf), n in zip(leaves, spec.lengths.tolist()):
        shape = tuple(leaf.shape)
        data.append(struct((n, *shape[1:]), leaf.dtype))
        seg.append(struct((n,), np.int32))
        pos.append(struct((n,), np.int32))
    return spec.assemble(data, seg, pos)
