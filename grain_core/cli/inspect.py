"""``grain-core inspect TARGET``: the pipeline as a tree, who provides each stage, its options, the
element spec of the output and per-stage timings from a short run."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from typing import Any

from grain_core.cli._about import KERNEL_DISTRIBUTION
from grain_core.cli._console import WIDTH, console, print_stats, wrap
from grain_core.cli._target import element_spec, load_target


def _providers() -> dict[str, str]:
    """Top-level module name -> the distribution (plugin) providing it."""
    out: dict[str, str] = {}
    try:
        from grain_core.plugins import registry

        reg = registry.get_registry()
        reg.ensure_loaded()
        for p in reg.provided.values():
            mod = getattr(p.obj, "__module__", "") or ""
            top = mod.split(".")[0]
            if top == "grain_core":  # the kernel's built-in plugin: provider_of names the kernel
                continue
            if top and top not in out:
                out[top] = p.distribution or f"{p.plugin} (registered in-process)"
    except Exception:
        pass
    return out


def provider_of(obj: Any, providers: dict[str, str] | None = None) -> str:
    """The distribution that provides ``obj``'s class."""
    providers = _providers() if providers is None else providers
    mod = type(obj).__module__ or ""
    top = mod.split(".")[0]
    if top == "grain_core":
        return KERNEL_DISTRIBUTION
    if top in providers:
        return providers[top]
    try:
        import importlib_metadata

        dists = importlib_metadata.packages_distributions().get(top)
        if dists:
            return dists[0]
    except Exception:
        pass
    return top or "?"


def _simple(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _simple(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, (list, tuple)) and len(v) <= 8 and all(
        x is None or isinstance(x, (bool, int, float, str)) for x in v
    ):
        return list(v)
    return None


def stage_options(ds: Any) -> dict[str, Any]:
    """Public simple attributes of a stage, and its identifying fields."""
    opts: dict[str, Any] = {}
    for k, v in sorted(getattr(ds, "__dict__", {}).items()):
        if k.startswith("_"):
            continue
        s = _simple(v)
        if s is not None:
            opts[k] = s
    try:
        fields = tuple(ds.fingerprint_fields().values())
        if fields:
            opts.setdefault("fields", [repr(f) for f in fields])
    except Exception:
        pass
    try:
        n = len(ds)
        import sys

        opts["len"] = "infinite" if n == sys.maxsize else n
    except Exception:
        pass
    return opts


def stage_tree(ds: Any) -> dict[str, Any]:
    """The pipeline as a nested dict: ``{stage, class, provider, options, parents: [...]}``."""
    from grain_core.dataset.describe import stage_label

    providers = _providers()

    def node(d: Any) -> dict[str, Any]:
        try:
            label = stage_label(d)
        except Exception:
            label = type(d).__name__
        provider = provider_of(d, providers)
        for v in getattr(d, "__dict__", {}).values():  # a kernel stage wrapping a plugin's source
            top = (type(v).__module__ or "").split(".")[0]
            if top in providers and providers[top] != provider:
                provider = f"{provider}; {type(v).__name__} from {providers[top]}"
                break
        return {
            "stage": label,
            "class": f"{type(d).__module__}.{type(d).__qualname__}",
            "provider": provider,
            "options": stage_options(d),
            "parents": [node(p) for p in (getattr(d, "parents", ()) or ())],
        }

    return node(ds)


def format_tree(tree: dict[str, Any], columns: int = WIDTH) -> str:
    """The tree as text at most ``columns`` wide: each stage's label, then its provider and
    options on lines of their own, folded under the tree guides."""
    lines: list[str] = []

    def walk(n: dict[str, Any], prefix: str, last: bool, root: bool) -> None:
        branch = "" if root else ("└─ " if last else "├─ ")
        child_prefix = prefix + ("" if root else ("   " if last else "│  "))
        detail = child_prefix + ("│  " if n["parents"] else "   ")
        lines.extend(wrap(n["stage"], prefix + branch, detail, columns))
        lines.extend(wrap(f"provider: {n['provider']}", detail, detail + "  ", columns))
        opts = {k: v for k, v in n["options"].items() if k != "fields"}
        if opts:
            text = ", ".join(f"{k}={v}" for k, v in opts.items())
            lines.extend(wrap(f"options: {text}", detail, detail + "  ", columns))
        for i, p in enumerate(n["parents"]):
            walk(p, child_prefix, i == len(n["parents"]) - 1, False)

    walk(tree, "", True, True)
    return "\n".join(line.rstrip() for line in lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    from grain_core.cli.bench import run_bench

    ds = load_target(args.target)
    tree = stage_tree(ds)
    spec = None
    stats = None
    error = None
    if args.steps > 0:
        try:
            result = run_bench(ds, seconds=args.seconds, steps=args.steps,
                               progress=not args.json, with_stats=True, label="inspect")
            if result["elements"]:
                spec = element_spec(result["_first"])
            stats = result["_stats"]
        except Exception as e:  # report, still show the tree
            error = f"{type(e).__name__}: {e}"
    if args.json:
        print(json.dumps({
            "target": args.target,
            "tree": tree,
            "element_spec": spec,
            "stats": stats.as_dict() if stats else None,
            "error": error,
        }, indent=2, default=str))
        return 1 if error else 0
    out = console()
    say = functools.partial(out.print, markup=False)
    for line in wrap(f"Pipeline {args.target} (output stage first):", "", "  ", out.width):
        say(line)
    say(format_tree(tree, out.width))
    say()
    if spec is not None:
        say("Element spec:")
        for leaf in spec:
            extra = f" len={leaf['length']}" if "length" in leaf else ""
            shape = "(" + ", ".join(map(str, leaf["shape"])) + ("," if len(leaf["shape"]) == 1 else "") + ")"
            text = f"{leaf['path']}: {leaf['type']} shape={shape} dtype={leaf['dtype']}{extra}"
            for line in wrap(text, "  ", "      ", out.width):
                say(line)
        say()
    if stats is not None:
        say(f"Per-stage timings ({stats.stages[0].elements if stats.stages else 0} elements):")
        print_stats(stats, out)
    if error:
        for line in wrap(f"error while iterating: {error}", "", "  ", out.width):
            say(line)
        return 1
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show a pipeline's stages, providers, element spec and timings",
                       description="Shows TARGET (file.py:name or module:name) as a tree of stages "
                       "with the plugin providing each, the output element spec and per-stage "
                       "timings from a short run.")
    p.add_argument("target")
    p.add_argument("--steps", type=int, default=20, help="elements to time (0: no run; default 20)")
    p.add_argument("--seconds", type=float, default=10.0, help="time limit of the run")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_inspect)
