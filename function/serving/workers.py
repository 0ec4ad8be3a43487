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
import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import os
import signal
import sys
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
        # What this pool's calls wait on besides their own answers: its death, with the reason (see run).
        # Made by the first call, on the server's event loop, which does not exist yet; the loop is kept
        # for the watchers (_watch), which are threads.
        self._died: asyncio.Future[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        started = self._start()
        # Started up front, not on the first calls: those would wait for the
        # imports, and a worker that cannot start stops the server here.
        pids = [future.result(timeout=START_TIMEOUT_SECONDS) for future in started]
        self.log.info("started workers", pids=sorted(pids))

    def _start(self) -> list[Future[int]]:
        """A new pool, the current one from now on, and watched; the futures of its workers' starts."""
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
        started = [executor.submit(_wait_for_all) for _ in range(self.workers)]
        self._executor = executor
        processes = list(executor._processes.values())  # the pool has no public way to list them (see _discard)
        threading.Thread(target=self._watch, args=(executor, processes), name="watch-workers", daemon=True).start()
        return started

    def _watch(self, executor: ProcessPoolExecutor, processes: list[multiprocessing.process.BaseProcess]) -> None:
        # Python's pool finds a dead worker too and fails the calls it holds,
        # but not always all of them (see run), and sometimes none: the calls
        # of a pool this thread saw die fail whatever the pool does.
        [ready, *_] = multiprocessing.connection.wait([process.sentinel for process in processes])
        if self._stopping or executor is not self._executor:
            return  # stopped as asked, or replaced once a call found it broken
        loop = self._loop
        if loop is None:
            return  # no call yet, so none to lose: the first finds the pool broken itself
        dead = next(process for process in processes if process.sentinel == ready)
        # Python's pool, finding a worker dead, sends the others SIGTERM, which they ignore, and waits for
        # them; from Python 3.12 it holds the pool's lock while it waits, and every submit takes that lock.
        # A worker blocked writing an answer no one reads never exits, so the next call's submit, on the
        # server's event loop, waited forever, and the loop never ran _found_dead, which kills them: the
        # server answered nothing more and did not exit (Python 3.13, CI, under load). They are killed here.
        _kill_workers(executor)
        dead.join(ORPHAN_CHECK_SECONDS)  # its pipe closes before the process can be reaped
        # The pool's own thread may reap it in the same instant: this join then
        # finds no child, and the code the other thread read lands a moment later.
        for _ in range(int(ORPHAN_CHECK_SECONDS / 0.01)):
            if dead.exitcode is not None:
                break
            time.sleep(0.01)
        with contextlib.suppress(RuntimeError):  # the loop closed: the server is done
            loop.call_soon_threadsafe(self._found_dead, executor, f"worker {dead.pid} {_how(dead.exitcode)}")

    def _found_dead(self, executor: ProcessPoolExecutor, why: str) -> None:
        if executor is self._executor:  # not replaced since
            self._worker_died(executor, self._died, why)

    async def run(self, data: bytes) -> bytes:
        """compose(data) in a worker; a fatal result if a worker of the pool died."""
        loop = self._loop = asyncio.get_running_loop()
        executor = self._executor
        if self._died is None or self._died.get_loop() is not loop:
            self._died = loop.create_future()
        died = self._died
        try:
            # The request as it came off the wire: the server never decodes it.
            call = loop.run_in_executor(executor, compose, data)
        except BrokenProcessPool as err:
            self._worker_died(executor, died, str(err))
            return self._fatal(data, died.result())
        try:
            await asyncio.wait((call, died), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()  # the caller left: the call is taken off the queue if no worker has it yet
            raise
        if call.done() and not call.cancelled():
            try:
                return call.result()
            except BrokenProcessPool as err:
                self._worker_died(executor, died, str(err))
                return self._fatal(data, died.result())
        # A call the broken pool will never answer, which fails with the others.
        # Python's pool fails every call it holds once it finds a worker dead,
        # but a call submitted while it does so may be left out (CPython 3.11:
        # its table of calls changes under it, or the call goes in after it was
        # emptied), and would wait forever. And when the watcher saw the death
        # first, replacing the pool cancelled the calls still in its queue: not
        # the caller's cancellation, which would leave the caller no answer.
        if not died.done():  # cancelled by shutdown(): the server has stopped serving
            raise asyncio.CancelledError
        call.add_done_callback(_retrieve)
        return self._fatal(data, died.result())

    def _worker_died(self, executor: ProcessPoolExecutor, died: asyncio.Future[str] | None, why: str) -> None:
        # A dead worker (killed, out of memory) fails every call the pool
        # holds. Each gets a fatal result, which applies and deletes nothing,
        # and Crossplane calls again; the first to see it starts a new pool
        # for the calls after.
        if executor is self._executor and not self._stopping:
            self.log.error("a worker died; starting the workers again", error=why)
            _discard(executor)
            self._start()
            self._died = None
        if died is not None and not died.done():
            died.set_result(why)

    @staticmethod
    def _fatal(data: bytes, why: str) -> bytes:
        rsp = fn.fatal(fn.answer_to(data), f"cannot compose Federation: a worker process died: {why}")
        return rsp.SerializeToString()

    def shutdown(self) -> None:
        """Stop the workers once the calls they run have finished."""
        self._stopping = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        # What is left is a discarded pool's (_discard): a worker its own thread had taken out of the
        # list _discard kills, which ignores SIGTERM and waits to write an answer no one reads. That
        # pool's thread waits for it, and the interpreter at exit for that thread: a server stopped
        # after a worker died once did not exit in 300 s (Python 3.13, CI). The current pool's are done.
        for child in multiprocessing.active_children():
            child.kill()
            child.join(ORPHAN_CHECK_SECONDS)


# How long the server, done serving, waits for the threads Python's pools leave before it exits without them.
STOP_SECONDS = 10


def leave_no_thread_behind(code: int, seconds: float = STOP_SECONDS) -> None:
    """Wait for this process's other non-daemon threads a while; exit with code without them if any is still there.

    Once the server has answered its calls and stopped its workers, nothing is left to do, yet the
    interpreter's exit joins every non-daemon thread, among them each process pool's manager thread.
    One of a pool broken by a killed worker can wait forever (on a queue's feeder writing to workers
    that are gone): a server stopped after a worker died once did not exit in 300 s (Python 3.13,
    CI, under load), until the kubelet's SIGKILL. Waiting is bounded here instead, and the error says which
    threads were left.
    """
    deadline = time.monotonic() + seconds
    for thread in _others():
        thread.join(max(0.0, deadline - time.monotonic()))
    left = sorted(thread.name for thread in _others() if thread.is_alive())
    if left:
        logging.get_logger().error("threads did not stop; exiting without them", threads=left)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _others() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]


def _how(exitcode: int | None) -> str:
    if exitcode is None:  # reaped by the pool's own thread first, which keeps the code
        return "died"
    return f"was killed by signal {-exitcode}" if exitcode < 0 else f"exited with code {exitcode}"


def _retrieve(call: asyncio.Future[bytes]) -> None:
    # A lost call's answer, should it come after all, read so that asyncio does not log it as never read.
    if not call.cancelled():
        call.exception()


def _discard(executor: ProcessPoolExecutor) -> None:
    # A broken pool sends its other workers SIGTERM, which they ignore, and
    # waits for them: one that finished its call meanwhile blocks writing the
    # answer no one reads, and waits forever, and so would the server's exit.
    # Python 3.11 has no public way to kill a pool's workers; its _processes
    # holds them.
    _kill_workers(executor)
    executor.shutdown(wait=False, cancel_futures=True)


def _kill_workers(executor: ProcessPoolExecutor) -> None:
    # Any thread may: the pool's manager thread may be waiting for them with the pool's lock held.
    for process in list((executor._processes or {}).values()):
        process.kill()


Pool = Thread | Processes
