"""Deadlines on whole calls for the blocking Google clients, and threads that never hold the exit.

- :class:`DeadlineAdapter`: a ``requests`` transport adapter under which a call's answer must
  arrive whole within its ``timeout``. ``requests`` (and urllib3 under it) apply ``timeout`` to
  each read of the socket, so a server that sends its headers and then a byte a second is never
  timed out; through this adapter it fails with ``requests.ReadTimeout`` once the call has taken
  ``timeout`` seconds (connect, headers and body together): the body is read step by step against
  the deadline, and a timer shuts the connection's socket at the deadline, which ends a read that
  is still waiting (headers trickled a byte at a time too). Mounted on the google-cloud-tpu REST
  transport's session, the v2alpha1 session and the OS Login client's.
- :class:`DaemonThreadPool`: an :class:`~concurrent.futures.Executor` whose worker threads are
  daemons. ``ThreadPoolExecutor``'s workers are joined when the interpreter exits, so one call
  still waiting on a hostile server kept a finished verb (``nodes``) from exiting.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import TypeVar

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

T = TypeVar("T")

#: Bytes read per step of a body (one ``recv`` at most returns this much).
_STEP_BYTES = 1 << 16


def whole_call_s(timeout: float | tuple[float | None, float | None] | None) -> float | None:
    """The seconds a whole call may take, from ``requests``' ``timeout`` (a number, or
    ``(connect, read)``: the larger), ``None`` for no limit."""
    if isinstance(timeout, tuple):
        parts = [t for t in timeout if t is not None]
        return max(parts) if parts else None
    return timeout


class _Call:
    """One call under a deadline: the connection it uses, so a timer can cut it."""

    def __init__(self) -> None:
        self.connection: HTTPConnection | None = None
        self.cut = False

    def shut(self) -> None:
        """The deadline passed: shut the connection's socket (a waiting read ends at once)."""
        self.cut = True
        sock = getattr(self.connection, "sock", None)
        if isinstance(sock, socket.socket):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


#: The call the current thread is sending (set by :meth:`DeadlineAdapter.send`).
_current = threading.local()


def _told(connection: object) -> None:
    """Tell the current thread's call (if any) which connection its pool gave it."""
    call = getattr(_current, "call", None)
    if isinstance(call, _Call) and isinstance(connection, HTTPConnection):
        call.connection = connection


class _WatchedPool(HTTPConnectionPool):
    """An HTTP pool that tells the current call which connection it got."""

    def _get_conn(self, timeout: float | None = None) -> HTTPConnection:
        connection = super()._get_conn(timeout)
        _told(connection)
        return connection  # type: ignore[return-value]


class _WatchedHttpsPool(HTTPSConnectionPool):
    """:class:`_WatchedPool` for HTTPS."""

    def _get_conn(self, timeout: float | None = None) -> HTTPConnection:
        connection = super()._get_conn(timeout)
        _told(connection)
        return connection  # type: ignore[return-value]


class DeadlineAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` whose non-streamed calls end within their ``timeout``, whole.

    A streamed call (``stream=True``) is the caller's to bound and passes through unchanged.

    Raises (from :meth:`send`): ``requests.ReadTimeout`` when the answer is not whole in time;
    ``requests.ConnectionError`` when the connection breaks while the body is read.
    """

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: object) -> None:
        """The pool manager, with pools that report each call's connection (see :class:`_Call`)."""
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _WatchedPool, "https": _WatchedHttpsPool}

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: float | tuple[float | None, float | None] | None = None,
             verify: bool | str = True, cert: str | tuple[str, str] | None = None,
             proxies: dict[str, str] | None = None) -> requests.Response:
        """Send ``request``; the whole answer within the deadline (see the class)."""
        total_s = whole_call_s(timeout)
        if stream or total_s is None:
            return super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies)
        started = time.monotonic()
        call = _current.call = _Call()
        timer = threading.Timer(total_s, call.shut)
        timer.daemon = True
        timer.start()
        try:
            response = super().send(request, stream=True, timeout=timeout, verify=verify, cert=cert,
                                    proxies=proxies)
            try:
                response._content = _read_body(response, started + total_s, total_s)
            finally:
                response.close()
        except requests.RequestException as exc:
            if call.cut and not isinstance(exc, requests.Timeout):
                raise requests.ReadTimeout(f"no whole answer within {total_s:g} s (timed out)",
                                           request=request) from exc
            raise
        finally:
            timer.cancel()
            _current.call = None
        return response


def _read_body(response: requests.Response, deadline: float, total_s: float) -> bytes:
    """The whole body of a streamed ``response`` by ``deadline`` (monotonic seconds)."""
    raw = response.raw
    body = bytearray()
    try:
        while True:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                raise requests.ReadTimeout(f"no whole answer within {total_s:g} s (timed out)",
                                           request=response.request, response=response)
            sock = getattr(getattr(raw, "_connection", None), "sock", None)
            if isinstance(sock, socket.socket):
                sock.settimeout(left_s)
            chunk = raw.read1(_STEP_BYTES, decode_content=True)
            if not chunk:
                return bytes(body)
            body += chunk
    except requests.RequestException:          # ours above (an OSError too): as it is
        raise
    except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
        raise requests.ReadTimeout(f"no whole answer within {total_s:g} s (timed out)",
                                   request=response.request, response=response) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise requests.ConnectionError(f"the connection broke while the answer was read: {exc}",
                                       request=response.request, response=response) from exc


class DaemonThreadPool(Executor):
    """At most ``size`` daemon worker threads, started as calls come (``loop.run_in_executor``).

    Args:
        size: the most calls running at once; more wait in line.
        name: the threads' name prefix (seen in thread dumps).
    """

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._calls: queue.SimpleQueue[tuple[Future[object], Callable[[], object]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> Future[T]:
        """Queue ``fn(*args, **kwargs)``; its future.

        Raises:
            RuntimeError: the pool was shut down.
        """
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new calls after shutdown")
            self._calls.put((future, lambda: fn(*args, **kwargs)))  # type: ignore[arg-type]
            if self._idle == 0 and self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}_{self._threads}", daemon=True).start()
            else:
                self._idle -= 1 if self._idle else 0
        return future

    def _work(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, call = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking calls; queued calls are cancelled when ``cancel_futures``. Never waits for a
        running call (its thread is a daemon and ends with it, or with the process)."""
        with self._lock:
            self._closed = True
            threads = self._threads
        if cancel_futures:
            while True:
                try:
                    item = self._calls.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in range(threads):
            self._calls.put(None)


def bound_session(session: object, pool_maxsize: int = 10) -> None:
    """Mount a :class:`DeadlineAdapter` on ``session`` (a ``requests.Session``, e.g. a google-cloud REST
    transport's ``_session``) for both schemes, so each of its calls ends within its timeout, whole;
    ``None`` or anything without ``mount`` is left alone."""
    mount = getattr(session, "mount", None)
    if mount is None:
        return
    adapter = DeadlineAdapter(pool_connections=4, pool_maxsize=pool_maxsize)
    mount("https://", adapter)
    mount("http://", adapter)
