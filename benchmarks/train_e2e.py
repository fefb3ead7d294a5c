"""End-to-end training-loop benchmark (issue 14): does the input pipeline keep a train step fed?

Three loops, each timed three ways:

* vision: ArrayRecord of 32x32x3 images -> shuffle -> decode + random flip -> batch 256 ->
  ``mp_prefetch`` -> ``device_put`` -> a small JAX CNN SGD step;
* vision from JPEG: JPEG bytes (96x96, written with Pillow) -> shuffle -> decode + random 64x64
  crop + flip + normalise (``image_work``, the work of ``bench_images``) -> batch 256 ->
  ``mp_prefetch`` -> ``device_put`` -> the same CNN;
* LM: token documents (16-512 tokens) -> ``FirstFitPackIterDataset`` into rows of 1024 ->
  batch -> ``device_put`` -> a small one-layer transformer SGD step (attention within segments).

For each it prints steps/s of the real loop, the fraction of the loop's time spent waiting for the
next batch (``next()`` on the pipeline), and the ceiling: the same step over batches already on the
device (no input pipeline at all). Only JAX and numpy are needed (no flax/optax): the models are a
few lines of ``jax.numpy``.

    python benchmarks/train_e2e.py            # the full size
    python benchmarks/train_e2e.py --small    # a quick CPU run (the ``train-e2e`` nox session)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

IMAGE = (32, 32, 3)


# --- data --------------------------------------------------------------------------------------


def write_images(path: Path, n: int) -> str:
    """``n`` records of 3072 image bytes + 1 label byte in one ArrayRecord file."""
    from array_record.python.array_record_module import ArrayRecordWriter

    rng = np.random.default_rng(0)
    w = ArrayRecordWriter(str(path), "group_size:64")
    for i in range(n):
        img = rng.integers(0, 256, size=IMAGE, dtype=np.uint8)
        w.write(img.tobytes() + bytes([i % 10]))
    w.close()
    return str(path)


def decode(record: bytes) -> dict[str, np.ndarray]:
    buf = np.frombuffer(record, dtype=np.uint8)
    return {"image": buf[:-1].reshape(IMAGE), "label": np.int32(buf[-1])}


def augment(x: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    img = x["image"]
    if rng.random() < 0.5:
        img = img[:, ::-1]
    return {"image": (img.astype(np.float32) - 127.5) / 127.5, "label": x["label"]}


def jpeg_example(record: tuple[bytes, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A ``(jpeg_bytes, label)`` pair to a training example: decoded, cropped, flipped, normalised."""
    from image_work import decode_augment

    data, label = record
    return {"image": decode_augment(data, rng), "label": np.int32(label)}


def make_docs(n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [
        {"tokens": rng.integers(1, 1000, size=int(k), dtype=np.int32)}
        for k in rng.integers(16, 513, size=n)
    ]


# --- models ------------------------------------------------------------------------------------


def cnn(width: int):
    import jax
    import jax.numpy as jnp

    k = jax.random.split(jax.random.PRNGKey(0), 3)
    params = {
        "c1": jax.random.normal(k[0], (3, 3, 3, width)) * 0.1,
        "c2": jax.random.normal(k[1], (3, 3, width, width)) * 0.1,
        "out": jax.random.normal(k[2], (width, 10)) * 0.1,
    }

    def loss(p, images, labels):
        dn = ("NHWC", "HWIO", "NHWC")
        h = jax.nn.relu(
            jax.lax.conv_general_dilated(images, p["c1"], (2, 2), "SAME", dimension_numbers=dn)
        )
        h = jax.nn.relu(
            jax.lax.conv_general_dilated(h, p["c2"], (2, 2), "SAME", dimension_numbers=dn)
        )
        logits = h.mean(axis=(1, 2)) @ p["out"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1))

    @jax.jit
    def step(p, batch):
        g = jax.grad(loss)(p, batch["image"], batch["label"])
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g)

    return params, step


def transformer(vocab: int, dim: int):
    import jax
    import jax.numpy as jnp

    k = jax.random.split(jax.random.PRNGKey(1), 6)
    s = dim**-0.5
    params = {
        "emb": jax.random.normal(k[0], (vocab, dim)) * 0.02,
        "qkv": jax.random.normal(k[1], (dim, 3 * dim)) * s,
        "o": jax.random.normal(k[2], (dim, dim)) * s,
        "mlp1": jax.random.normal(k[3], (dim, 4 * dim)) * s,
        "mlp2": jax.random.normal(k[4], (4 * dim, dim)) * (4 * dim) ** -0.5,
    }

    def loss(p, tokens, seg, pos):
        x = p["emb"][tokens]
        q, kk, v = jnp.split(x @ p["qkv"], 3, axis=-1)
        att = q @ kk.transpose(0, 2, 1) * s
        same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] > 0)
        causal = pos[:, :, None] >= pos[:, None, :]
        att = jnp.where(same & causal, att, -1e9)
        x = x + (jax.nn.softmax(att) @ v) @ p["o"]
        x = x + jax.nn.relu(x @ p["mlp1"]) @ p["mlp2"]
        logits = x[:, :-1] @ p["emb"].T
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], axis=-1)[..., 0]
        mask = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)
        return (nll * mask).sum() / jnp.maximum(mask.sum(), 1)

    @jax.jit
    def step(p, batch):
        g = jax.grad(loss)(
            p, batch["tokens"], batch["tokens_segment_ids"], batch["tokens_positions"]
        )
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g)

    return params, step


# --- the loop ----------------------------------------------------------------------------------


def run_loop(name: str, ds, params, step, steps: int, warmup: int = 2) -> None:
    """Times ``steps`` train steps fed by ``ds`` and the same step on device-resident batches."""
    import jax

    it = iter(ds)
    kept = []
    try:
        for _ in range(warmup):  # compile, start workers
            batch = next(it)
            params = step(params, batch)
            jax.block_until_ready(params)
            kept.append(batch)
        waited = 0.0
        done = 0
        t0 = time.perf_counter()
        for _ in range(steps):
            w0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            waited += time.perf_counter() - w0
            params = step(params, batch)
            jax.block_until_ready(params)
            if len(kept) < 4:
                kept.append(batch)
            done += 1
        total = time.perf_counter() - t0
    finally:
        it.close()
    t1 = time.perf_counter()
    for i in range(done):
        params = step(params, kept[i % len(kept)])
    jax.block_until_ready(params)
    ceiling = done / (time.perf_counter() - t1)
    rate = done / total
    print(
        f"{name:<44} {rate:8.2f} steps/s   waiting for data {waited / total:6.1%}   "
        f"ceiling (batches on device) {ceiling:8.2f} steps/s   [{done} steps]",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a quick CPU-sized run")
    parser.add_argument("--workers", type=int, default=None, help="mp_prefetch workers")
    args = parser.parse_args()

    import jax

    import grain_core as grain

    small = args.small
    images = 3072 if small else 60_000
    steps = 8 if small else 200
    workers = args.workers if args.workers is not None else (1 if small else 4)
    width = 16 if small else 64
    device = jax.devices()[0]
    print(f"device: {device.platform} ({device.device_kind}); mp_prefetch workers: {workers}")

    with tempfile.TemporaryDirectory() as root:
        path = write_images(Path(root) / "images.array_record", images)
        vision = (
            grain.MapDataset.source(grain.sources.ArrayRecordDataSource(path))
            .seed(0)
            .shuffle()
            .map(decode)
            .random_map(augment)
            .repeat()
            .batch(256, drop_remainder=True)
            .to_iter_dataset()
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
        )
        vision = grain.experimental.device_put(vision, device)
        params, step = cnn(width)
        run_loop("vision: ArrayRecord 32x32 -> CNN, batch 256", vision, params, step, steps)

        from image_work import make_jpegs

        jpegs = [(data, i % 10) for i, data in enumerate(make_jpegs(1024 if small else 20_000))]
        vision_jpeg = (
            grain.MapDataset.source(jpegs)
            .seed(0)
            .shuffle()
            .random_map(jpeg_example)
            .repeat()
            .batch(256, drop_remainder=True)
            .to_iter_dataset()
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
        )
        vision_jpeg = grain.experimental.device_put(vision_jpeg, device)
        params, step = cnn(width)
        run_loop("vision: JPEG 96px -> crop 64 -> CNN, batch 256", vision_jpeg, params, step, steps)

        docs = make_docs(4000 if small else 100_000)
        rows = 8 if small else 32
        lm = grain.experimental.FirstFitPackIterDataset(
            grain.MapDataset.source(docs).seed(0).shuffle().repeat().to_iter_dataset(),
            length_struct={"tokens": 1024},
            num_packing_bins=rows,
        ).batch(rows, drop_remainder=True)
        lm = grain.experimental.device_put(lm, device)
        params, step = transformer(1000, 64 if small else 256)
        run_loop(f"LM: FirstFit packing 1024 -> transformer, batch {rows}", lm, params, step, steps)


if __name__ == "__main__":
    main()
