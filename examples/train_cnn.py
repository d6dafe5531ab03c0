"""Train the seeds' convolutional classifier on real handwritten digits.

The guide's (seed 001) training loop -- a ``tf.keras.Sequential`` CNN, a
``tf.data`` pipeline, ``tf.GradientTape``, ``tf.train.AdamOptimizer`` -- on
scikit-learn's 8x8 digits (shipped with the package, nothing is downloaded), on the
default device (``--device`` picks another). It shows progress bars, prints the test
accuracy, writes TensorBoard logs (``tensorboard --logdir runs/demo``) and a
checkpoint, and a second run continues from that checkpoint, as seed 002 shows.

    bash scripts/dev.sh demo                       # installs, then runs the demos
    .venv/bin/python examples/train_cnn.py --epochs 3 --device cpu:0
    .venv/bin/python examples/train_cnn.py --quick    # 5 steps: does everything work?
    .venv/bin/python examples/train_cnn.py --dataset fashion_mnist   # after
        # sudo apt-get install dataset-fashion-mnist (28x28 images, slower on a CPU)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import tapeflow as tf

tfe = tf


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=("digits", "fashion_mnist", "mnist"), default="digits",
                   help="digits: scikit-learn's 8x8 digits (default); fashion_mnist / mnist: "
                        "28x28 IDX files on this machine")
    p.add_argument("--epochs", type=int, default=10, help="epochs to train in this run")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=2e-3)
    p.add_argument("--device", default=None,
                   help="where to train, e.g. cpu:0, gpu:0 (default: tapeflow's default "
                        "device, the first GPU when there is one)")
    p.add_argument("--logdir", default=os.path.join("runs", "demo"),
                   help="TensorBoard log directory (default: runs/demo)")
    p.add_argument("--ckpt-dir", default=os.path.join("runs", "demo", "ckpt"),
                   help="checkpoint directory; a checkpoint there is resumed "
                        "(default: runs/demo/ckpt)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop each epoch after this many steps (quick runs, tests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--quick", action="store_true",
                   help="a check that everything works: one epoch of 5 steps, no progress "
                        "bars (still writes TensorBoard logs and a checkpoint)")
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.no_progress = 1, True
        args.max_steps = 5 if args.max_steps is None else args.max_steps
    return args


def load(name):
    loader = {"digits": tf.datasets.digits, "fashion_mnist": tf.datasets.fashion_mnist,
              "mnist": tf.datasets.mnist}[name]
    try:
        (x_train, y_train), (x_test, y_test) = loader.load_data()
    except FileNotFoundError as e:
        sys.exit(f"train_cnn.py: {e}")
    # the guide's formatting: add a channel axis, scale to [0, 1], int64 labels
    prep = lambda x: (x[..., np.newaxis] / 255).astype(np.float32)
    return (prep(x_train), y_train.astype(np.int64)), (prep(x_test), y_test.astype(np.int64))


def build_model():
    """The README's CNN (conv / pool / conv / pool / dense), sized for small images."""
    return tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, [3, 3], padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D((2, 2), (2, 2)),
        tf.keras.layers.Conv2D(64, [3, 3], padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D((2, 2), (2, 2)),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


def accuracy(model, images, labels, batch_size=500):
    correct = 0
    for x, y in tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch_size):
        predictions = tf.argmax(model(x), axis=1)
        correct += int(tf.reduce_sum(tf.cast(tf.equal(predictions, y), tf.int32)))
    return correct / len(labels)


class Progress:
    """tqdm when it is installed and wanted, else one line per epoch."""

    def __init__(self, total, desc, enabled):
        self._bar = None
        if enabled:
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=total, desc=desc, unit="batch", leave=True,
                                 dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, loss):
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            self._bar.update(1)

    def close(self, summary):
        if self._bar is not None:
            self._bar.set_postfix_str(summary, refresh=False)
            self._bar.close()
        else:
            print(summary, flush=True)


def main(argv=None):
    args = parse_args(argv)
    t_start = time.perf_counter()
    tf.set_random_seed(args.seed)
    device = args.device or str(tf.config.get_default_device())
    (x_train, y_train), (x_test, y_test) = load(args.dataset)
    print(f"tapeflow {tf.__version__}: {args.dataset}, {len(x_train)} training and "
          f"{len(x_test)} test images of {x_train.shape[1]}x{x_train.shape[2]}, "
          f"on {device}", flush=True)

    with tf.device(device):
        model = build_model()
        optimizer = tf.train.AdamOptimizer(learning_rate=args.learning_rate)
        global_step = tf.train.get_or_create_global_step()
        epoch = tf.Variable(0, dtype=tf.int64, name="epoch", trainable=False)
        model(tf.zeros([1] + list(x_train.shape[1:])))      # create the variables
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                         global_step=global_step, epoch=epoch)
        manager = tf.train.CheckpointManager(checkpoint, args.ckpt_dir, max_to_keep=3)
        latest = tf.train.latest_checkpoint(args.ckpt_dir)
        if latest:
            checkpoint.restore(latest)
            print(f"resumed from {latest} (epoch {int(epoch)}, step {int(global_step)}, "
                  f"test accuracy {accuracy(model, x_test, y_test):.2%})", flush=True)

        first_epoch = int(epoch)
        dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                   .shuffle(len(x_train), seed=args.seed + first_epoch)
                   .batch(args.batch_size)
                   .prefetch(2))
        steps_per_epoch = len(dataset)
        if args.max_steps is not None:
            steps_per_epoch = min(steps_per_epoch, args.max_steps)

        acc, path = None, latest
        writer = tf.summary.create_file_writer(args.logdir)
        with writer.as_default():
            if not latest:
                with tf.summary.always_record_summaries():
                    tf.summary.image("test_images", x_test[:6], max_images=6, step=0)
            for e in range(first_epoch + 1, first_epoch + args.epochs + 1):
                bar = Progress(steps_per_epoch, f"epoch {e}", not args.no_progress)
                t0 = time.perf_counter()
                losses = []
                for images, labels in dataset.take(steps_per_epoch):
                    with tf.GradientTape() as tape:
                        logits = model(images, training=True)
                        loss_value = tf.losses.sparse_softmax_cross_entropy(labels, logits)
                    # the loss at step k (after k updates), every 10 steps from step 0
                    with tf.summary.record_summaries_every_n_global_steps(10):
                        tf.summary.scalar("loss", loss_value)
                    grads = tape.gradient(loss_value, model.trainable_variables)
                    optimizer.apply_gradients(zip(grads, model.trainable_variables),
                                              global_step=global_step)
                    losses.append(float(loss_value))
                    bar.update(losses[-1])
                epoch.assign(e)
                acc = accuracy(model, x_test, y_test)
                with tf.summary.always_record_summaries():
                    tf.summary.scalar("test_accuracy", acc)
                    tf.summary.scalar("epoch_loss", float(np.mean(losses)))
                    for v in model.trainable_variables:
                        tf.summary.histogram(v.name.split(":")[0], v)
                path = manager.save(checkpoint_number=e)      # ckpt-<epoch>, the last 3 kept
                bar.close(f"epoch {e}: loss {np.mean(losses):.4f}, test accuracy {acc:.2%}, "
                          f"{time.perf_counter() - t0:.1f} s, saved {path}")
        writer.close()

    if acc is None:
        acc = accuracy(model, x_test, y_test)
    print(f"test accuracy: {acc:.2%} after {int(epoch)} epochs ({int(global_step)} steps) "
          f"in {time.perf_counter() - t_start:.1f} s")
    print(f"TensorBoard logs: {args.logdir} (tensorboard --logdir {args.logdir}); "
          f"checkpoint: {path}; run again to continue from it")
    return acc


if __name__ == "__main__":
    main()
