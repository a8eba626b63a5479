"""Where independent units of work run: local worker processes (the default) or Ray.

    for index, result in run_tasks(fn, tasks, executor="local" | "ray", jobs=N, address=None, env={...}):
        ...  # the driver stores each result as it arrives

`fn` is a picklable module-level function and `tasks` a list of argument tuples; results come back in the order
the tasks finish. Nothing is written by the executors: the caller stores each result when it arrives, so an
interrupted run keeps every finished task.

local  jobs = 1: in this process, one task after the other; jobs > 1: a concurrent.futures.ProcessPoolExecutor
       of `jobs` spawned worker processes (each imports its frameworks once and runs task after task).
ray    one Ray task per unit of work (ray.remote(fn) with num_cpus=1), results collected with ray.wait as they
       finish. Without `address`, a local Ray instance with num_cpus = jobs, no dashboard, worker output kept
       out of the driver's terminal and usage statistics off (RAY_USAGE_STATS_ENABLED=0), shut down at the
       end; with `address` (e.g. "ray://head:10001" or "auto"), an existing cluster whose nodes have gelulab
       installed, named in one line on stderr when joined (its address, dashboard, nodes and CPUs). `env` is
       passed to the workers as runtime_env env_vars (GELULAB_THREADS, GELULAB_DEVICE). A task whose workers Ray
       loses beyond its retries (a worker process or its node killed, out of memory) ends the run with
       WorkersLost, one line saying how many tasks had finished and been handed back (kept by the caller).
       Ray is the optional extra gelulab[ray].
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed

from gelulab.core.plumbing.interrupts import die_with_parent

EXECUTORS = ("local", "ray")
RAY_HINT = "pip install -c constraints.txt -e '.[ray]'"
RAY_OBJECT_STORE_BYTES = 256 * 1024**2  # local instance: results are small JSON texts


class WorkersLost(ValueError):
    """Ray could not run a task to its end, beyond its retries: its worker process or node died, or Ray could
    not set it up (a ray.exceptions.RayError that is not the task's own exception). A ValueError, so that the
    command line reports it in one line (exit 2); every task that finished before was handed back and kept."""


def lost_workers(error: BaseException, index: int, n_tasks: int, n_done: int) -> WorkersLost:
    """The one-line WorkersLost for Ray's `error` on task `index` (0-based) of `n_tasks`, after `n_done` tasks
    had finished (and were handed back to the caller, which stored them)."""
    first = " ".join((str(error).strip().splitlines() or [""])[0].split())
    detail = f"{type(error).__name__}: {first}" if first else type(error).__name__
    if len(detail) > 200:
        detail = detail[:199] + "…"
    return WorkersLost(f"--executor ray: Ray lost task {index + 1} of {n_tasks} after its retries ({detail}); "
                       f"{n_done} of {n_tasks} tasks had finished and are kept; rerun the same command to run the "
                       "rest")


def cluster_line(address: str, context, nodes: list, resources: dict) -> str:
    """The line that says which Ray cluster `ray.init(address=address)` joined: the address asked for, the
    cluster's GCS address and dashboard URL (from the RayContext `context`: address_info, dashboard_url), its
    alive nodes (from ray.nodes()) and CPUs (ray.cluster_resources())."""
    info = getattr(context, "address_info", None) or {}
    gcs = info.get("gcs_address") or info.get("address") or address
    dashboard = getattr(context, "dashboard_url", None) or info.get("webui_url") or "none"
    if dashboard != "none" and "://" not in dashboard:
        dashboard = f"http://{dashboard}"
    alive = sum(1 for n in nodes if n.get("Alive", n.get("alive", False)))
    cpus = resources.get("CPU")
    cpu_text = f", {cpus:g} CPU{'s' if cpus != 1 else ''}" if isinstance(cpus, (int, float)) else ""
    return (f"--executor ray --address {address}: joined the Ray cluster at {gcs} (dashboard {dashboard}; "
            f"{alive} node{'s' if alive != 1 else ''} alive{cpu_text})")


def check_executor(executor: str, jobs, address) -> None:
    """Raise ValueError naming the option for an unknown executor, a jobs count < 1, an address without
    --executor ray, or --executor ray when Ray is not installed (with the install command)."""
    if executor not in EXECUTORS:
        raise ValueError(f"--executor {executor!r}: expected one of {list(EXECUTORS)}")
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
        raise ValueError(f"--jobs {jobs!r}: expected a positive integer")
    if address is not None and executor != "ray":
        raise ValueError(f"--address {address!r}: applies to --executor ray only")
    if executor == "ray":
        _import_ray()


def _import_ray():
    try:
        import ray
    except ImportError as e:
        raise ValueError(f"--executor ray: Ray is not installed ({e}); install it with: {RAY_HINT}") from e
    return ray


def run_tasks(fn: Callable, tasks: list, executor: str = "local", jobs: int | None = None,
              address: str | None = None, env: dict | None = None) -> Iterator[tuple[int, object]]:
    """Run fn(*task) for every task; yield (index into tasks, result) as each finishes.

    jobs: worker processes (local) or the local Ray instance's CPUs (default: os.cpu_count()); ignored with
    `address`. A task's exception is raised here (Ray: as the RayTaskError that wraps it, an instance of the
    original type); closing the generator early (an exception or Ctrl-C in the caller) stops the workers:
    pending tasks are cancelled and running ones terminated. Raises ValueError as check_executor does, and
    WorkersLost (a ValueError) when Ray loses a task beyond its retries, after every finished task was yielded.
    """
    check_executor(executor, jobs, address)
    jobs = jobs or os.cpu_count() or 1
    if executor == "ray":
        return _ray(fn, tasks, jobs, address, env or {})
    return _local(fn, tasks, jobs)


def _local(fn, tasks, jobs) -> Iterator[tuple[int, object]]:
    if jobs <= 1 or len(tasks) <= 1:
        for i, t in enumerate(tasks):
            yield i, fn(*t)
        return
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=mp.get_context("spawn"),
                               initializer=die_with_parent, initargs=(os.getpid(),))
    done = False
    try:
        futures = {pool.submit(fn, *t): i for i, t in enumerate(tasks)}
        for f in as_completed(futures):
            yield futures[f], f.result()
        done = True
    finally:
        if not done:  # stop the running workers too, not only the queued tasks
            for p in list(getattr(pool, "_processes", {}).values()):
                p.terminate()
        pool.shutdown(wait=done, cancel_futures=True)


def _ray(fn, tasks, jobs, address, env) -> Iterator[tuple[int, object]]:
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        kw = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING,
              "runtime_env": {"env_vars": {k: str(v) for k, v in env.items()}}}
        with warnings.catch_warnings():
            # Ray starts its processes with subprocess (fork + exec), which jax's fork hook warns about needlessly
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
            if address:
                context = ray.init(address=address, **kw)
            else:
                ray.init(num_cpus=jobs, object_store_memory=RAY_OBJECT_STORE_BYTES, **kw)
        started = True
        if address:
            print(cluster_line(address, context, ray.nodes(), ray.cluster_resources()), file=sys.stderr, flush=True)
    remote = ray.remote(num_cpus=1)(fn)
    refs = {remote.remote(*t): i for i, t in enumerate(tasks)}
    pending = list(refs)
    done = 0
    try:
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as e:
                    if isinstance(e, ray.exceptions.RayTaskError):
                        raise  # the task's own exception (an instance of its type): the caller's to report
                    raise lost_workers(e, refs[ref], len(tasks), done) from e
                done += 1
                yield refs[ref], result
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
