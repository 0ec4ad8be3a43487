"""Where the served function composes: one thread of its own, or worker processes, one per CPU.

Never on the gRPC server's event loop: a loop busy composing takes no new
calls, and on SIGTERM the server answers only the calls it has taken
(function/serving/serve.py's grace period); those still queued in gRPC are cancelled.

Composing is pure Python and holds the GIL throughout, so more threads would
still use one core: only processes compose in parallel. Nor would several
servers on one port (SO_REUSEPORT) share the work: Crossplane dials a
function over one HTTP/2 connection and sends its concurrent calls on it, and
a connection stays with the process that accepted it. Hence one gRPC server,
whose event loop only moves bytes, and the composing behind it.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from crossplane.function import logging

from function.serving import fn

if TYPE_CHECKING:
    from multiprocessing.synchronize import Barrier

# How long starting the workers may take: a fresh interpreter importing the
# function (pydantic models, schemas) takes a second or two on a busy node.
START_TIMEOUT_SECONDS = 120
ORPHAN_CHECK_SECONDS = 1


# The barrier every worker of a pool reaches once started (see Processes._start).
_started: Barrier | None = None


def _start_worker(level: logging.Level, started: Barrier) -> None:
    # Only the server decides when to stop: it stops taking calls on SIGTERM,
    # lets those under way finish, then shuts the workers down. A worker that
    # took SIGTERM (or the terminal's Ctrl-C, sent to the whole process group)
    # itself would fail the calls it holds.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.configure(level=level)
    global _started  # noqa: PLW0603 - one per worker process, set once
    _started = started
    threading.Thread(target=_exit_with, args=(os.getppid(),), name="exit-with-server", daemon=True).start()


def _exit_with(server: int) -> None:
    # A server killed outright (SIGKILL, out of memory) cannot stop its
    # workers, and they ignore SIGTERM and wait for calls on a pipe they hold
    # both ends of: each leaves once it is orphaned instead.
    while os.getppid() == server:
        time.sleep(ORPHAN_CHECK_SECONDS)
    os._exit(1)


def _wait_for_all() -> int:
    # One of these per worker: none returns before every worker has started,
    # so no worker takes two.
    if _started is not None:  # set by _start_worker, before any call
        _started.wait(timeout=START_TIMEOUT_SECONDS)
    return os.getpid()


# Whether this process has set aside what lives as long as it does (compose).
_settled = False


def compose(data: bytes) -> bytes:
    """fn.run_bytes(data); after the first call in this process, what exists then is moved out of the collector's sight.

    The imports and what the first call builds lazily (pydantic's validators, the
    Kubernetes schemas, the release table) live as long as the process, and every
    full collection scanned them again: at 128 pools, with a new spec per call,
    pauses of 30 to 50 ms every eight or nine calls, which set the p95. Frozen
    (gc.freeze), they are never scanned; once a collection has removed that
    first call's garbage, nothing that could be freed is frozen with them.
    """
    answer = fn.run_bytes(data)
    global _settled  # noqa: PLW0603 - once per process
    if not _settled:
        _settled = True
        gc.collect()
        gc.freeze()
    return answer


def start(workers: int, level: logging.Level = logging.Level.INFO) -> Pool:
    """One composing thread for 1, else that many worker processes."""
    return Thread() if workers == 1 else Processes(workers, level)


class Thread:
    """fn.run_bytes in one thread of this process, one call at a time, as the GIL would have it anyway."""

    def __init__(self) -> None:
        """Start no thread yet: the first call does."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compose")

    async def run(self, data: bytes) -> bytes:
        """compose(data) in the composing thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, compose, data)

    def shutdown(self) -> None:
        """Stop the thread once the call it runs has finished."""
        self._executor.shutdown(wait=True, cancel_futures=True)


class Processes:
    """Worker processes that run fn.run_bytes, started again if one dies."""

    def __init__(self, workers: int, level: logging.Level = logging.Level.INFO) -> None:
        """Start the worker processes and wait until each has imported the function."""
        self.workers = workers
        self.level = level
        self.log = logging.get_logger()
        self._executor, started = self._start()
        # Started up front, not on the first calls: those would wait for the
        # imports, and a worker that cannot start stops the server here.
        pids = [future.result(timeout=START_TIMEOUT_SECONDS) for future in started]
        self.log.info("started workers", pids=sorted(pids))

    def _start(self) -> tuple[ProcessPoolExecutor, list[Future[int]]]:
        # Not fork: the server's process has gRPC's threads, and a child
        # forked from it inherits their locks in whatever state they were.
        context = multiprocessing.get_context("spawn")
        executor = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(self.level, context.Barrier(self.workers)),
        )
        # A pool starts a worker for each call submitted while none is idle,
        # so these start all of them.
        return executor, [executor.submit(_wait_for_all) for _ in range(self.workers)]

    async def run(self, data: bytes) -> bytes:
        """compose(data) in a worker; a fatal result if the worker died."""
        executor = self._executor
        try:
            # The request as it came off the wire: the server never decodes it.
            return await asyncio.get_running_loop().run_in_executor(executor, compose, data)
        except BrokenProcessPool as err:
            # A dead worker (killed, out of memory) fails every call the pool
            # holds. Each gets a fatal result, which applies and deletes
            # nothing, and Crossplane calls again; the first to see it starts
            # a new pool for the calls after.
            if executor is self._executor:
                self.log.error("a worker died; starting the workers again", error=str(err))
                _discard(executor)
                self._executor, _ = self._start()
            rsp = fn.fatal(fn.answer_to(data), f"cannot compose Federation: a worker process died: {err}")
            return rsp.SerializeToString()

    def shutdown(self) -> None:
        """Stop the workers once the calls they run have finished."""
        self._executor.shutdown(wait=True, cancel_futures=True)


def _discard(executor: ProcessPoolExecutor) -> None:
    # A broken pool sends its other workers SIGTERM, which they ignore, and
    # waits for them: one that finished its call meanwhile blocks writing the
    # answer no one reads, and waits forever, and so would the server's exit.
    # Python 3.11 has no public way to kill a pool's workers; its _processes
    # holds them.
    for process in list((executor._processes or {}).values()):
        process.kill()
    executor.shutdown(wait=False, cancel_futures=True)


Pool = Thread | Processes
