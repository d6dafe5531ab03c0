"""The seeds' CNN (examples/train_cnn.py's), data-parallel over MPI: every process trains on its shard of the
digits, gradients are averaged over the processes (tf.distributed, Horovod's way).

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/distributed_mnist.py   # a laptop
    srun -n 8 .venv/bin/python examples/distributed_mnist.py                # Slurm
    .venv/bin/python examples/distributed_mnist.py                          # 1 process

The global batch (``--batch-size``, default 64) is split over the processes, so the
model sees the same number of images per step at any process count; the learning rate
stays that of the one-process run. Rank 0 alone prints, writes TensorBoard logs and
checkpoints; a second run resumes from the checkpoint (restored on rank 0 and
broadcast to the others). As root, Open MPI wants
``OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` (containers).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tapeflow as tf
from train_cnn import build_model, load       # the one-process example's model and data


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64, help="global batch (all ranks)")
    p.add_argument("--learning-rate", type=float, default=2e-3)
    p.add_argument("--max-steps", type=int, default=None, help="steps per epoch at most")
    p.add_argument("--logdir", default=os.path.join("runs", "distributed"))
    p.add_argument("--ckpt-dir", default=os.path.join("runs", "distributed", "ckpt"))
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    tf.distributed.init()
    rank, size = tf.distributed.rank(), tf.distributed.size()
    if args.batch_size % size:
        raise SystemExit(f"--batch-size {args.batch_size} does not divide among {size} ranks")
    (x_train, y_train), (x_test, y_test) = load("digits")
    # one process per GPU where there are GPUs, else the default device
    device = (f"cuda:{tf.distributed.local_rank()}"
              if any(d.startswith("cuda") for d in tf.config.list_devices()) else
              str(tf.config.get_default_device()))
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"tapeflow {tf.__version__}: {size} process(es), {args.batch_size // size} images "
        f"per process per step, on {device}", flush=True)

    tf.set_random_seed(args.seed + rank)      # different on purpose: the broadcast fixes it
    with tf.device(device):
        model = build_model()
        optimizer = tf.train.AdamOptimizer(learning_rate=args.learning_rate)
        epoch = tf.Variable(0, dtype=tf.int64, name="epoch", trainable=False)
        model(tf.zeros([1, 8, 8, 1]))                      # create the variables
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch)
        latest = tf.train.latest_checkpoint(args.ckpt_dir)
        if latest and rank == 0:
            checkpoint.restore(latest)
        # everyone starts from rank 0's weights, optimizer state and epoch
        tf.distributed.broadcast_variables(model.variables + [epoch], root_rank=0)
        tf.distributed.broadcast_optimizer_state(optimizer, model.trainable_variables, 0)
        if latest:
            say(f"resumed from {latest} (epoch {int(epoch)})", flush=True)

        manager = tf.train.CheckpointManager(checkpoint, args.ckpt_dir, max_to_keep=2) \
            if rank == 0 else None
        writer = tf.summary.create_file_writer(args.logdir) if rank == 0 else None
        first = int(epoch)
        for e in range(first + 1, first + args.epochs + 1):
            # every rank shuffles the same way, then keeps its shard of each global batch
            dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                       .shuffle(len(x_train), seed=args.seed + e)
                       .batch(args.batch_size, drop_remainder=True)
                       .unbatch().shard(size, rank).batch(args.batch_size // size))
            t0, losses = time.perf_counter(), []
            for step, (images, labels) in enumerate(dataset):
                if args.max_steps is not None and step >= args.max_steps:
                    break
                with tf.GradientTape() as tape:
                    loss = tf.losses.sparse_softmax_cross_entropy(labels, model(images,
                                                                             training=True))
                tape = tf.distributed.DistributedGradientTape(tape)
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                losses.append(float(loss))
            epoch.assign(e)
            mean_loss = float(tf.distributed.allreduce(tf.constant(np.mean(losses))))
            acc = float(np.mean(np.argmax(model(tf.constant(x_test)).numpy(), 1) == y_test))
            if rank == 0:
                with writer.as_default(), tf.summary.always_record_summaries():
                    tf.summary.scalar("loss", mean_loss, step=e)
                    tf.summary.scalar("test_accuracy", acc, step=e)
                path = manager.save(checkpoint_number=e)
                say(f"epoch {e}: loss {mean_loss:.4f}, test accuracy {acc:.2%}, "
                    f"{time.perf_counter() - t0:.1f} s, saved {path}", flush=True)
        if writer is not None:
            writer.close()
    acc = float(np.mean(np.argmax(model(tf.constant(x_test)).numpy(), 1) == y_test))
    say(f"test accuracy: {acc:.2%} after {int(epoch)} epochs on {size} process(es)")
    tf.distributed.shutdown()
    return acc


if __name__ == "__main__":
    main()
