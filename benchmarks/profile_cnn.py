"""Where the seeds' CNN training step (compare.py's cnn32) spends its time, per op,
measured with tapeflow.profiler (issue 20):

    TAPEFLOW_PLUGINS=cpu_numpy .venv/bin/python benchmarks/profile_cnn.py [--steps 20]
"""

import argparse
import time

import numpy as np

import tapeflow as tf

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--trace", default=None, help="also write a Chrome trace here")
args = ap.parse_args()

rng = np.random.default_rng(0)
x = tf.constant(rng.random((args.batch, 28, 28, 1), dtype=np.float32))
y = tf.constant(rng.integers(0, 10, args.batch).astype(np.int64))
tf.random.set_seed(0)
model = tf.keras.Sequential([tf.keras.layers.Conv2D(16, [3, 3], activation="relu"),
                             tf.keras.layers.Conv2D(16, [3, 3], activation="relu"),
                             tf.keras.layers.GlobalAveragePooling2D(),
                             tf.keras.layers.Dense(10)])
opt = tf.train.AdamOptimizer()


def step():
    with tf.GradientTape() as tape:
        loss = tf.losses.sparse_softmax_cross_entropy(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))


for _ in range(3):
    step()
t = time.perf_counter()
for _ in range(args.steps):
    step()
wall = (time.perf_counter() - t) / args.steps
with tf.profiler.profile() as prof:
    for _ in range(args.steps):
        step()
kernel_ms = sum(e.duration_us for e in prof.events) / 1e3 / args.steps
print(f"step {wall * 1e3:.2f} ms (unprofiled); kernels {kernel_ms:.2f} ms per step, "
      f"{len(prof.events) // args.steps} kernel calls per step; the rest "
      f"({max(0.0, wall * 1e3 - kernel_ms):.2f} ms) is dispatch, tape and Python")
print(prof.key_averages().table(sort_by="total", row_limit=15))
if args.trace:
    prof.export_chrome_trace(args.trace)
