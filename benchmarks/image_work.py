"""The image benchmark's per-element work, in a module of its own that imports neither library:
worker processes of both import it by name to run the same functions.

The work is what a vision input pipeline does per example: decode JPEG bytes (Pillow), take a
random 64x64 crop, flip it at random, and normalise to float32.
"""

from __future__ import annotations

import io

import numpy as np

#: Side of the square JPEGs written by :func:`make_jpegs`, and of the crop taken from them.
IMAGE_SIDE = 96
CROP_SIDE = 64
MEAN = np.float32(127.5)
SCALE = np.float32(1 / 127.5)


def make_jpegs(n: int, seed: int = 0) -> list[bytes]:
    """``n`` distinct JPEG-encoded RGB images of ``IMAGE_SIDE`` pixels a side (smooth gradients plus
    noise, so they compress like photographs rather than like flat colour)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 255, IMAGE_SIDE, dtype=np.float32)
    base = (ramp[:, None, None] + ramp[None, :, None]) / 2
    out = []
    for _ in range(n):
        noise = rng.normal(0, 24, (IMAGE_SIDE, IMAGE_SIDE, 3)).astype(np.float32)
        tint = rng.uniform(0, 255, 3).astype(np.float32)
        pixels = np.clip(base * 0.6 + tint * 0.4 + noise, 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def decode(data: bytes) -> np.ndarray:
    """JPEG bytes to a ``uint8`` array of shape ``(H, W, 3)``."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def augment(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random ``CROP_SIDE`` square crop, flipped left-right with probability 1/2, normalised to
    ``float32`` in [-1, 1]."""
    top, left = rng.integers(0, image.shape[0] - CROP_SIDE + 1, 2)
    crop = image[top : top + CROP_SIDE, left : left + CROP_SIDE]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return (crop.astype(np.float32) - MEAN) * SCALE


def decode_augment(data: bytes, rng: np.random.Generator) -> np.ndarray:
    """:func:`decode` then :func:`augment`: one example's whole work."""
    return augment(decode(data), rng)


_POOL_IMAGES: list[bytes] = []


def pool_init(images: list[bytes]) -> None:
    """A ``multiprocessing.Pool`` initializer: the examples, sent to each worker once."""
    _POOL_IMAGES[:] = images


def decode_augment_range(span: tuple[int, int]) -> int:
    """The plain-``multiprocessing`` reference: examples ``[lo, hi)`` of the worker's copy (see
    :func:`pool_init`), each decoded and augmented with its own generator; returns how many."""
    lo, hi = span
    for i in range(lo, hi):
        decode_augment(_POOL_IMAGES[i], np.random.default_rng(i))
    return hi - lo
