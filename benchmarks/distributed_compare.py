"""tf.distributed against raw mpi4py, and data-parallel step times at 1, 2 and 3 ranks.

    .venv/bin/python benchmarks/distributed_compare.py            # launches the runs below
    .venv/bin/python benchmarks/distributed_compare.py --json out.json
    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/distributed_compare.py --worker

Measured, per launch (``mpiexec -n N`` for N in ``--ranks``, default 1 2 3):

* **gradient allreduce**: the six gradients of the MLP 784-256-256-10 (1.07 MB of
  float32) averaged the way ``DistributedGradientTape`` does it (``None`` agreement,
  metadata check, fusion into one buffer, the result tensors) against raw mpi4py
  ``Allreduce`` of one flat float32 buffer of the same bytes (preallocated, no Python
  objects), interleaved, median of ``--rounds``; also with the check off. Target
  (issue 17): at most 1.2x.
* **steps**: the MLP SGD step on a global batch of 256 and the seeds' CNN Adam step
  (the cnn32 of compare.py) on a global batch of 64, each rank on its 1/N, with the
  gradients averaged; plus the same step without the allreduce (the compute the
  scaling model needs).
* **strategy step**: the MLP step again, written for ``tf.distribute`` (``strategy.run``
  under ``MultiWorkerMirroredStrategy``; its compute: the same step with
  ``experimental_aggregate_gradients=False``).
* **allreduce sizes**: raw ``Allreduce`` of 4 KB to 16 MB, to fit the alpha-beta model
  (``benchmarks/scaling_model.py``).

On this 2-core machine 3 ranks oversubscribe the cores: that row shows the cost of
sharing cores, not of communication.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
MLP = [784, 256, 256, 10]
MLP_BATCH = 256
CNN_BATCH = 64


def median_us(samples):
    return float(np.median(samples)) * 1e6


# --- worker (under mpiexec) -------------------------------------------------------------

def mlp_grads_shapes():
    shapes = []
    for a, b in zip(MLP[:-1], MLP[1:]):
        shapes += [(a, b), (b,)]
    return shapes


def bench_allreduce(tf, D, rounds):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(D.rank())
    shapes = mlp_grads_shapes()
    grads = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    sources = [tf.Variable(np.zeros(s, np.float32)) for s in shapes]
    total = sum(int(np.prod(s)) for s in shapes)
    send = rng.standard_normal(total).astype(np.float32)
    recv = np.empty_like(send)
    from tapeflow.distributed._training import reduce_gradients
    world = tf.distributed._world.world()

    def ours():
        reduce_gradients(grads, sources)

    def ours_nocheck():
        world.check = False
        try:
            reduce_gradients(grads, sources)
        finally:
            world.check = True

    def raw():
        comm.Allreduce(send, recv, op=MPI.SUM)

    fns = {"tapeflow": ours, "tapeflow_nocheck": ours_nocheck, "mpi4py": raw}
    for f in fns.values():
        for _ in range(5):
            f()
    samples = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            comm.Barrier()
            t = time.perf_counter()
            f()
            samples[k].append(time.perf_counter() - t)
    out = {k: median_us(v) for k, v in samples.items()}
    out["bytes"] = total * 4
    return out


def bench_sizes(D, rounds):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    out = {}
    for nbytes in (4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20):
        buf = np.ones(nbytes // 4, np.float32)
        res = np.empty_like(buf)
        for _ in range(3):
            comm.Allreduce(buf, res)
        v = []
        for _ in range(max(5, rounds // 2)):
            comm.Barrier()
            t = time.perf_counter()
            comm.Allreduce(buf, res)
            v.append(time.perf_counter() - t)
        out[str(nbytes)] = median_us(v)
    return out


def mlp_logits(tf, x, params):
    """The MLP's forward pass: ReLU between the ``(weights, bias)`` pairs of ``params``."""
    h = x
    for i in range(0, len(params), 2):
        h = tf.matmul(h, params[i]) + params[i + 1]
        if i + 2 < len(params):
            h = tf.nn.relu(h)
    return h


def mlp_step_fns(tf, D, n, rank):
    rng = np.random.default_rng(0)
    per = MLP_BATCH // n
    x = tf.constant(rng.standard_normal((MLP_BATCH, MLP[0])).astype(np.float32)[rank * per:
                                                                               (rank + 1) * per])
    y = tf.constant(rng.integers(0, MLP[-1], MLP_BATCH)[rank * per:(rank + 1) * per])
    params = []
    for a, b in zip(MLP[:-1], MLP[1:]):
        params += [tf.Variable(rng.standard_normal((a, b)).astype(np.float32) * 0.05),
                   tf.Variable(np.zeros(b, np.float32))]
    opt = tf.train.GradientDescentOptimizer(0.01)

    def step(reduce):
        with tf.GradientTape() as tape:
            h = mlp_logits(tf, x, params)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                                 logits=h))
        if reduce:
            tape = D.DistributedGradientTape(tape)
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
    return step


def cnn_step_fns(tf, D, n, rank):
    rng = np.random.default_rng(0)
    per = CNN_BATCH // n
    x = tf.constant(rng.random((CNN_BATCH, 28, 28, 1), dtype=np.float32)[rank * per:
                                                                         (rank + 1) * per])
    y = tf.constant(rng.integers(0, 10, CNN_BATCH)[rank * per:(rank + 1) * per])
    tf.random.set_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Conv2D(16, [3, 3], activation="relu"),
                                 tf.keras.layers.Conv2D(16, [3, 3], activation="relu"),
                                 tf.keras.layers.GlobalAveragePooling2D(),
                                 tf.keras.layers.Dense(10)])
    model(x)
    opt = tf.train.AdamOptimizer()

    def step(reduce):
        with tf.GradientTape() as tape:
            loss = tf.losses.sparse_softmax_cross_entropy(y, model(x, training=True))
        if reduce:
            tape = D.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    return step


def strategy_step_fns(tf, D, n, rank):
    """The MLP step of mlp_step_fns through tf.distribute.MultiWorkerMirroredStrategy
    (strategy.run, the optimizer summing the gradients over the workers); without the
    sum (``experimental_aggregate_gradients=False``) it is the compute alone."""
    rng = np.random.default_rng(0)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x = rng.standard_normal((MLP_BATCH, MLP[0])).astype(np.float32)
    y = rng.integers(0, MLP[-1], MLP_BATCH)
    xb, yb = next(iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(MLP_BATCH))))
    with strategy.scope():
        params = []
        for a, b in zip(MLP[:-1], MLP[1:]):
            params += [tf.Variable(rng.standard_normal((a, b)).astype(np.float32) * 0.05),
                       tf.Variable(np.zeros(b, np.float32))]
        opt = tf.keras.optimizers.SGD(0.01)

    def step_fn(xr, yr, reduce):
        with tf.GradientTape() as tape:
            h = mlp_logits(tf, xr, params)
            loss = tf.nn.compute_average_loss(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=yr, logits=h), global_batch_size=MLP_BATCH)
        opt.apply_gradients(zip(tape.gradient(loss, params), params),
                            experimental_aggregate_gradients=reduce)

    def step(reduce):
        strategy.run(step_fn, args=(xb, yb, reduce))
    return step


def bench_step(D, make, rounds):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    step = make
    for _ in range(3):
        step(True)
        step(False)
    full, compute = [], []
    for _ in range(rounds):
        comm.Barrier()
        t = time.perf_counter()
        step(True)
        full.append(time.perf_counter() - t)
        comm.Barrier()
        t = time.perf_counter()
        step(False)
        compute.append(time.perf_counter() - t)
    # the job's step: the slowest rank's
    f = comm.allreduce(median_us(full), op=MPI.MAX)
    c = comm.allreduce(median_us(compute), op=MPI.MAX)
    return {"step_us": f, "compute_us": c}


def worker(args):
    import tapeflow as tf
    D = tf.distributed
    D.init()
    n, rank = D.size(), D.rank()
    res = {"ranks": n}
    if n > 1:
        res["allreduce_mlp_grads"] = bench_allreduce(tf, D, args.rounds)
        res["allreduce_sizes_us"] = bench_sizes(D, args.rounds)
    res["mlp_step"] = bench_step(D, mlp_step_fns(tf, D, n, rank), args.rounds)
    res["cnn_step"] = bench_step(D, cnn_step_fns(tf, D, n, rank), max(5, args.rounds // 3))
    res["mlp_strategy_step"] = bench_step(D, strategy_step_fns(tf, D, n, rank), args.rounds)
    if rank == 0 and args.json:
        pathlib.Path(args.json).write_text(json.dumps(res, indent=1))
    if rank == 0 and not args.json:
        print(json.dumps(res, indent=1))


# --- driver -----------------------------------------------------------------------------

def launch(n, rounds, out):
    exe = pathlib.Path(sys.executable).parent / "mpiexec"
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("TAPEFLOW_DEFAULT_DEVICE", "cpu:0")
    cmd = [str(exe), "--oversubscribe", "-n", str(n), sys.executable, __file__, "--worker",
           "--rounds", str(rounds), "--json", out]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    return json.loads(pathlib.Path(out).read_text())


def table(results):
    lines = []
    two = next((r for r in results if r["ranks"] == 2), None)
    if two:
        a = two["allreduce_mlp_grads"]
        lines += [f"gradient allreduce of the MLP ({a['bytes'] / 1e6:.2f} MB float32), 2 ranks:",
                  f"  tapeflow (DistributedGradientTape's path) {a['tapeflow']:8.0f} us  "
                  f"{a['tapeflow'] / a['mpi4py']:.2f}x raw   (target <= 1.2x)",
                  f"  tapeflow, check off                       {a['tapeflow_nocheck']:8.0f} us  "
                  f"{a['tapeflow_nocheck'] / a['mpi4py']:.2f}x raw",
                  f"  raw mpi4py Allreduce, one flat buffer     {a['mpi4py']:8.0f} us", ""]
    one = next((r for r in results if r["ranks"] == 1), None)
    lines.append("data-parallel step (global batch: MLP 256, CNN 64), the slowest rank's median:")
    lines.append(f"  {'ranks':>5} {'MLP step':>10} {'compute':>10} {'vs 1 rank':>10}   "
                 f"{'CNN step':>10} {'compute':>10} {'vs 1 rank':>10}")
    for r in results:
        m, c = r["mlp_step"], r["cnn_step"]
        sm = f"{one['mlp_step']['step_us'] / m['step_us']:.2f}x" if one else "-"
        sc = f"{one['cnn_step']['step_us'] / c['step_us']:.2f}x" if one else "-"
        lines.append(f"  {r['ranks']:>5} {m['step_us'] / 1e3:>8.2f}ms {m['compute_us'] / 1e3:>8.2f}ms "
                     f"{sm:>10}   {c['step_us'] / 1e3:>8.2f}ms {c['compute_us'] / 1e3:>8.2f}ms {sc:>10}")
    if all("mlp_strategy_step" in r for r in results):
        lines.append("  the MLP step through tf.distribute.MultiWorkerMirroredStrategy:")
        for r in results:
            m = r["mlp_strategy_step"]
            sm = (f"{one['mlp_strategy_step']['step_us'] / m['step_us']:.2f}x" if one else "-")
            lines.append(f"  {r['ranks']:>5} {m['step_us'] / 1e3:>8.2f}ms "
                         f"{m['compute_us'] / 1e3:>8.2f}ms {sm:>10}")
    lines.append("  (vs 1 rank: speed-up of the step; 3 ranks share 2 cores here)")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help="run under mpiexec (one launch)")
    ap.add_argument("--ranks", type=int, nargs="*", default=[1, 2, 3])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    results = []
    with tempfile.TemporaryDirectory() as d:
        for n in args.ranks:
            results.append(launch(n, args.rounds, os.path.join(d, f"r{n}.json")))
    print(table(results))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
