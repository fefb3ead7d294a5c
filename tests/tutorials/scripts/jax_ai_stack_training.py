"""The Grain part of jax-ai-stack's "Data loaders on CPU with JAX" tutorial, as a script.

Same calls: a user ``Dataset`` class (``__len__`` / ``__getitem__`` returning ``(image, label)``),
``pygrain.SequentialSampler(num_records=..., shard_options=pygrain.NoSharding())``,
``pygrain.DataLoader(data_source=..., sampler=..., operations=[pygrain.Batch(batch_size)])`` used
as a generator in a JAX training loop (one-hot labels, SGD on a linear classifier) for two epochs.

Stand-in: torchvision's MNIST (downloaded) becomes 64 generated 8x8 "digits" whose pixels encode
their label.
"""

import grain.python as pygrain
import jax
import jax.numpy as jnp
import numpy as np
from tutorial_io import done, show

n_targets = 10
num_pixels = 64
batch_size = 16


class Dataset:
    def __init__(self, train=True):
        self.train = train
        self.load_data()

    def load_data(self):
        rng = np.random.default_rng(0 if self.train else 1)
        labels = np.arange(64) % n_targets
        images = rng.integers(0, 50, size=(64, 8, 8)).astype(np.uint8)
        images[:, labels // 2, labels % 8] = 255
        self.dataset = list(zip(images, labels))

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        img, label = self.dataset[index]
        return np.ravel(np.array(img, dtype=np.float32)) / 255.0, int(label)


def one_hot(x, k, dtype=jnp.float32):
    return jnp.array(x[:, None] == jnp.arange(k), dtype)


def loss(params, images, targets):
    w, b = params
    logits = images @ w + b
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * targets, axis=1))


@jax.jit
def update(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return [p - 0.5 * g for p, g in zip(params, grads)]


def main():
    mnist_dataset = Dataset()
    sampler = pygrain.SequentialSampler(num_records=len(mnist_dataset), shard_options=pygrain.NoSharding())

    def pygrain_training_generator():
        return pygrain.DataLoader(data_source=mnist_dataset, sampler=sampler, operations=[pygrain.Batch(batch_size)])

    train_images = jnp.array([mnist_dataset[i][0] for i in range(len(mnist_dataset))])
    train_labels = one_hot(np.array([mnist_dataset[i][1] for i in range(len(mnist_dataset))]), n_targets)
    show("train_shapes", [list(train_images.shape), list(train_labels.shape)])

    params = [jnp.zeros((num_pixels, n_targets)), jnp.zeros((n_targets,))]
    before = float(loss(params, train_images, train_labels))
    seen = []
    for epoch in range(2):
        for x, y in pygrain_training_generator():
            seen.append([epoch, list(x.shape), str(x.dtype), y.tolist()])
            params = update(params, jnp.asarray(x), one_hot(np.asarray(y), n_targets))
    show("batches", seen, echo=False)
    after = float(loss(params, train_images, train_labels))
    show("loss_decreased", after < before)
    done()


if __name__ == "__main__":
    main()
