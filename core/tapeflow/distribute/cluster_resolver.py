"""``tf.distribute.cluster_resolver``: who the workers of a job are, read from its launcher.

A cluster resolver answers three questions for a multi-worker strategy: which jobs and
tasks the cluster has (:meth:`ClusterResolver.cluster_spec`), which task this process
is (``task_type``, ``task_id``) and how many accelerators it has
(:meth:`ClusterResolver.num_accelerators`). TensorFlow's resolvers feed gRPC servers;
tapeflow runs no servers: the processes of a job are started by MPI's launcher
(``mpiexec``, ``srun``) and talk through ``tf.distributed``, so here a resolver only
*describes* the job, and :class:`~tapeflow.distribute.MultiWorkerMirroredStrategy`
checks that the description agrees with the MPI job it runs in.

* :class:`MPIClusterResolver`: the MPI job this process belongs to (rank and size from
  ``tf.distributed``): what ``MultiWorkerMirroredStrategy()`` uses under ``mpiexec``.
* :class:`TFConfigClusterResolver`: the ``TF_CONFIG`` environment variable, as
  TensorFlow writes it (what ``MultiWorkerMirroredStrategy()`` uses otherwise).
* :class:`SlurmClusterResolver`: a Slurm job step (``srun``'s ``SLURM_*`` variables).
* :class:`SimpleClusterResolver`: a description given by hand.

>>> import tapeflow as tf
>>> spec = tf.distribute.cluster_resolver.ClusterSpec({"worker": ["h0:2222", "h1:2222"]})
>>> r = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, task_type="worker",
...                                                          task_id=1)
>>> r.cluster_spec().num_tasks("worker"), r.master("worker", 1), r.master("worker", 0, "grpc")
(2, 'h1:2222', 'grpc://h0:2222')
"""

from __future__ import annotations

import json
import os
import re

from .. import distributed as _dist
from ..errors import InvalidArgumentError, NotFoundError
from ..runtime import devices as _devices

__all__ = ["ClusterSpec", "ClusterResolver", "SimpleClusterResolver", "TFConfigClusterResolver",
           "SlurmClusterResolver", "MPIClusterResolver"]


class ClusterSpec:
    """The jobs of a cluster and the address of each task: ``{"worker": ["h0:2222",
    "h1:2222"], "chief": [...]}`` (a list per job, or a ``{task index: address}`` dict
    for sparse jobs), as ``tf.train.ClusterSpec``.

    >>> import tapeflow as tf
    >>> spec = tf.distribute.cluster_resolver.ClusterSpec(
    ...     {"chief": ["h0:1"], "worker": {1: "h2:1", 0: "h1:1"}})
    >>> spec.jobs, spec.task_address("worker", 1), spec.job_tasks("worker")
    (['chief', 'worker'], 'h2:1', ['h1:1', 'h2:1'])
    >>> spec.as_dict()
    {'chief': ['h0:1'], 'worker': ['h1:1', 'h2:1']}
    """

    def __init__(self, cluster=None):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if cluster is None:
            cluster = {}
        if not isinstance(cluster, dict):
            raise InvalidArgumentError(
                f"ClusterSpec: expected a dict of job name -> list of addresses (or a "
                f"ClusterSpec), got {type(cluster).__name__}")
        self._jobs: dict[str, dict[int, str]] = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str) or not job:
                raise InvalidArgumentError(f"ClusterSpec: job names are strings, got {job!r}")
            if isinstance(tasks, dict):
                entries = {}
                for k, v in tasks.items():
                    try:
                        entries[int(k)] = str(v)
                    except (TypeError, ValueError):
                        raise InvalidArgumentError(
                            f"ClusterSpec: task indices of job {job!r} must be ints, "
                            f"got {k!r}") from None
            elif isinstance(tasks, (list, tuple)):
                entries = {i: str(a) for i, a in enumerate(tasks)}
            else:
                raise InvalidArgumentError(
                    f"ClusterSpec: job {job!r} must map to a list of addresses or a dict "
                    f"of task index -> address, got {type(tasks).__name__}")
            self._jobs[job] = dict(sorted(entries.items()))

    @property
    def jobs(self) -> list:
        """The job names, in the order given."""
        return list(self._jobs)

    def _job(self, job):
        if job not in self._jobs:
            raise NotFoundError(f"ClusterSpec has no job {job!r}; its jobs: {self.jobs}")
        return self._jobs[job]

    def num_tasks(self, job_name) -> int:
        """How many tasks ``job_name`` has."""
        return len(self._job(job_name))

    def task_indices(self, job_name) -> list:
        """The task indices of ``job_name``, ascending."""
        return list(self._job(job_name))

    def task_address(self, job_name, task_index) -> str:
        """The address of task ``task_index`` of ``job_name``."""
        tasks = self._job(job_name)
        if task_index not in tasks:
            raise NotFoundError(f"ClusterSpec: job {job_name!r} has no task {task_index!r}; "
                                f"its tasks: {list(tasks)}")
        return tasks[task_index]

    def job_tasks(self, job_name) -> list:
        """The addresses of ``job_name``'s tasks, in index order (``None`` for gaps)."""
        tasks = self._job(job_name)
        n = max(tasks) + 1 if tasks else 0
        return [tasks.get(i) for i in range(n)]

    def as_dict(self) -> dict:
        """``{job: [addresses]}`` (``{job: {index: address}}`` for a sparse job)."""
        out = {}
        for job, tasks in self._jobs.items():
            dense = list(tasks) == list(range(len(tasks)))
            out[job] = list(tasks.values()) if dense else dict(tasks)
        return out

    def __bool__(self):
        return bool(self._jobs)

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self.as_dict() == other.as_dict()

    def __repr__(self):
        return f"ClusterSpec({self.as_dict()!r})"


def _address(spec, task_type, task_id, rpc_layer):
    if not spec or task_type is None or task_id is None:
        return ""
    addr = spec.task_address(task_type, task_id)
    return f"{rpc_layer}://{addr}" if rpc_layer else addr


def local_accelerators() -> dict:
    """``{"GPU": n}`` for this process's GPUs, ``{}`` without any."""
    n = _devices.num_gpus()
    return {"GPU": n} if n else {}


class ClusterResolver:
    """The interface of the resolvers: ``cluster_spec()``, ``master(...)``,
    ``num_accelerators(...)``, and the properties ``task_type``, ``task_id``,
    ``rpc_layer`` and ``environment``. Subclasses implement ``cluster_spec`` and
    ``master``."""

    task_type = None
    task_id = None
    rpc_layer = None

    def cluster_spec(self) -> ClusterSpec:
        raise NotImplementedError(f"{type(self).__name__} does not implement cluster_spec()")

    def master(self, task_type=None, task_id=None, rpc_layer=None) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not implement master()")

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None) -> dict:
        """Accelerators per task by kind, e.g. ``{"GPU": 2}``: this process's GPUs."""
        return local_accelerators()

    @property
    def environment(self) -> str:
        """Where the job runs (``""``: nowhere in particular; TensorFlow's ``"google"``
        changes nothing here)."""
        return ""


class SimpleClusterResolver(ClusterResolver):
    """A cluster described by hand: ``SimpleClusterResolver(cluster_spec, master="",
    task_type=None, task_id=None, environment="", num_accelerators=None,
    rpc_layer=None)``.

    >>> import tapeflow as tf
    >>> r = tf.distribute.cluster_resolver.SimpleClusterResolver(
    ...     tf.distribute.cluster_resolver.ClusterSpec({"worker": ["a:1"]}),
    ...     task_type="worker", task_id=0, num_accelerators={"GPU": 2})
    >>> r.num_accelerators(), r.task_type, r.task_id
    ({'GPU': 2}, 'worker', 0)
    """

    def __init__(self, cluster_spec, master="", task_type=None, task_id=None, environment="",
                 num_accelerators=None, rpc_layer=None):
        self._spec = ClusterSpec(cluster_spec)
        self._master = master
        self.task_type = task_type
        self.task_id = task_id
        self._environment = environment
        self._accelerators = num_accelerators
        self.rpc_layer = rpc_layer

    def cluster_spec(self):
        return self._spec

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        if task_type is not None and task_id is not None:
            return _address(self._spec, task_type, task_id, rpc_layer or self.rpc_layer)
        return self._master

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        if self._accelerators is None:
            return local_accelerators()
        return dict(self._accelerators)

    @property
    def environment(self):
        return self._environment


class TFConfigClusterResolver(ClusterResolver):
    """The cluster named by the ``TF_CONFIG`` environment variable, a JSON object
    ``{"cluster": {job: [addresses]}, "task": {"type": ..., "index": ...},
    "rpc_layer": ..., "environment": ...}``, as TensorFlow's launchers write it.
    Without ``TF_CONFIG`` the cluster is empty (one process on its own).
    ``task_type``/``task_id``/``rpc_layer`` given here win over ``TF_CONFIG``'s.

    tapeflow starts no gRPC servers: a ``TF_CONFIG`` with several workers is run by
    starting the processes with ``mpiexec``/``srun`` (see
    :class:`~tapeflow.distribute.MultiWorkerMirroredStrategy`).

    With ``TF_CONFIG='{"cluster": {"worker": ["h0:1", "h1:1"]}, "task": {"type":
    "worker", "index": 1}}'``: ``cluster_spec()`` is ``ClusterSpec({'worker': ['h0:1',
    'h1:1']})``, ``task_type`` ``'worker'``, ``task_id`` ``1``, ``master()`` ``'h1:1'``.

    >>> import tapeflow as tf
    >>> r = tf.distribute.cluster_resolver.TFConfigClusterResolver(task_type="worker",
    ...                                                            task_id=0)
    >>> r.task_type, r.task_id, r.rpc_layer
    ('worker', 0, None)
    """

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None):
        raw = os.environ.get("TF_CONFIG") or "{}"
        try:
            config = json.loads(raw)
        except ValueError as e:
            raise InvalidArgumentError(
                f"TF_CONFIG is not valid JSON ({e}): {raw[:200]!r}") from None
        if not isinstance(config, dict):
            raise InvalidArgumentError(f"TF_CONFIG must be a JSON object, got {raw[:200]!r}")
        self._config = config
        task = config.get("task") or {}
        self.task_type = task_type if task_type is not None else task.get("type")
        index = task_id if task_id is not None else task.get("index")
        self.task_id = None if index is None else int(index)
        self.rpc_layer = rpc_layer if rpc_layer is not None else config.get("rpc_layer")
        self._environment = (environment if environment is not None
                             else config.get("environment", ""))
        self._spec = ClusterSpec(config.get("cluster") or {})

    def cluster_spec(self):
        return self._spec

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        """The address of ``task_type``/``task_id`` (default: this task), with
        ``rpc_layer://`` in front when one is set; ``""`` without a cluster."""
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        return _address(self._spec, task_type, task_id, rpc_layer or self.rpc_layer)

    @property
    def environment(self):
        return self._environment


# --- Slurm --------------------------------------------------------------------------------

def expand_hostlist(hostlist: str) -> list:
    """Slurm's compressed host list in full: ``"n[01-03,07],gpu5"`` ->
    ``['n01', 'n02', 'n03', 'n07', 'gpu5']``.

    >>> import tapeflow as tf
    >>> tf.distribute.cluster_resolver.expand_hostlist("n[01-02]-ib,c[1,3]")
    ['n01-ib', 'n02-ib', 'c1', 'c3']
    """
    names, depth, start = [], 0, 0
    for i, ch in enumerate(hostlist + ","):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            if hostlist[start:i]:
                names += _expand_one(hostlist[start:i])
            start = i + 1
    return names


def _expand_one(name):
    m = re.search(r"\[([^\]]*)\]", name)
    if m is None:
        return [name]
    head, tail = name[:m.start()], name[m.end():]
    out = []
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        if hi:
            out += [f"{head}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)]
        else:
            out.append(head + lo)
    return [h + t for h in out for t in _expand_one(tail)]


def expand_tasks_per_node(spec: str) -> list:
    """Slurm's ``SLURM_STEP_TASKS_PER_NODE``: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    out = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if m is None:
            raise InvalidArgumentError(f"cannot read Slurm's tasks per node {spec!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def _slurm(env, *names):
    for n in names:
        if env.get(n):
            return env[n]
    raise InvalidArgumentError(
        f"SlurmClusterResolver: {names[0]} is not set: this process was not started by "
        "srun (run it as a task of a job step: srun -n N python script.py)")


class SlurmClusterResolver(ClusterResolver):
    """The tasks of a Slurm job step (started by ``srun``), from its ``SLURM_*``
    variables: ``SLURM_PROCID`` is this task's rank, the step's node list and tasks per
    node place the ranks on hosts (ranks fill the nodes in order), and ``jobs`` (a
    ``{job name: number of tasks}`` dict, default ``{"worker": all tasks}``) splits the
    ranks into jobs in order. Addresses are ``host:port`` with ports from ``port_base``
    per task on a node (a description only: tapeflow opens no ports).

    ``gpus_per_node`` defaults to this machine's GPU count, ``gpus_per_task`` to
    ``gpus_per_node // tasks_per_node``. ``auto_set_gpu`` is accepted: tapeflow does
    not rewrite ``CUDA_VISIBLE_DEVICES``; a multi-worker strategy places each task on
    ``cuda:<its local rank>`` instead.
    """

    def __init__(self, jobs=None, port_base=8888, gpus_per_node=None, gpus_per_task=None,
                 tasks_per_node=None, auto_set_gpu=True, rpc_layer="grpc"):
        env = os.environ
        self.rank = int(_slurm(env, "SLURM_PROCID"))
        ntasks = int(_slurm(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"))
        hosts = expand_hostlist(_slurm(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                       "SLURM_NODELIST"))
        if tasks_per_node is None:
            per_node = expand_tasks_per_node(_slurm(env, "SLURM_STEP_TASKS_PER_NODE",
                                                    "SLURM_TASKS_PER_NODE"))
        elif isinstance(tasks_per_node, dict):
            per_node = [int(tasks_per_node[h]) for h in hosts]
        else:
            per_node = [int(tasks_per_node)] * len(hosts)
        addresses = [f"{h}:{port_base + k}" for h, n in zip(hosts, per_node) for k in range(n)]
        if len(addresses) < ntasks:
            raise InvalidArgumentError(
                f"SlurmClusterResolver: {ntasks} tasks but the nodes {hosts} hold "
                f"{len(addresses)} ({per_node} per node)")
        jobs = {"worker": ntasks} if jobs is None else dict(jobs)
        if sum(jobs.values()) != ntasks:
            raise InvalidArgumentError(
                f"SlurmClusterResolver: jobs={jobs} ask for {sum(jobs.values())} tasks but "
                f"the job step has {ntasks} (srun -n {ntasks})")
        cluster, r = {}, 0
        for job, n in jobs.items():
            cluster[job] = addresses[r:r + n]
            if r <= self.rank < r + n:
                self.task_type, self.task_id = job, self.rank - r
            r += n
        self._spec = ClusterSpec(cluster)
        self.rpc_layer = rpc_layer
        self.auto_set_gpu = auto_set_gpu
        node = next(i for i in range(len(per_node)) if sum(per_node[:i + 1]) > self.rank)
        self.tasks_per_node = per_node[node]
        self.gpus_per_node = (local_accelerators().get("GPU", 0) if gpus_per_node is None
                              else int(gpus_per_node))
        self.gpus_per_task = (self.gpus_per_node // max(1, self.tasks_per_node)
                              if gpus_per_task is None else int(gpus_per_task))

    def cluster_spec(self):
        return self._spec

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        return _address(self._spec, task_type, task_id, rpc_layer or self.rpc_layer)

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {"GPU": self.gpus_per_task} if self.gpus_per_task else {}


class MPIClusterResolver(ClusterResolver):
    """The MPI job this process runs in (``mpiexec``, ``srun`` with an MPI, or one
    process on its own): ``task_type`` ``"worker"``, ``task_id`` the MPI rank, and one
    worker per rank. MPI addresses processes by rank, not by host and port, so the
    addresses are ``"mpi:<rank>"``. Creating it joins the job (``tf.distributed.init()``).

    >>> import tapeflow as tf
    >>> r = tf.distribute.cluster_resolver.MPIClusterResolver()
    >>> r.cluster_spec(), r.task_type, r.task_id, r.local_rank
    (ClusterSpec({'worker': ['mpi:0']}), 'worker', 0, 0)
    """

    def __init__(self):
        _dist.init()
        self.task_type = "worker"
        self.task_id = _dist.rank()
        self.local_rank = _dist.local_rank()
        self._spec = ClusterSpec({"worker": [f"mpi:{r}" for r in range(_dist.size())]})
        self.rpc_layer = None

    def cluster_spec(self):
        return self._spec

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        return _address(self._spec, task_type, task_id, rpc_layer)
