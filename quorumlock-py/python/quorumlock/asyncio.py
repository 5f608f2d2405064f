"""The asyncio client: :class:`Redlock`, with ``async with`` locks whose
loss cancels the block.

The locks live on quorumlock's own runtime, in Rust threads that never
need the GIL: renewals go on while the event loop is busy. What the loop
must do itself is hear of a loss: when the lock is lost, the task running
the ``async with`` block is cancelled at its next ``await``, and
:class:`~quorumlock.LockLost` is raised out of the block (as
``asyncio.timeout()`` turns its cancellation into ``TimeoutError``).

::

    from quorumlock.asyncio import Redlock

    locks = Redlock(["redis://127.0.0.1:6379"])
    async with locks.lock("doc:1001", ttl=30, wait=0) as guard:
        ...  # raises LockHeld at once if another owner holds it
    await locks.aclose()
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable, Dict, Generator, Optional, TypeVar, Union

from . import _common, _quorumlock
from ._common import DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_TTL, Resources, Seconds
from ._errors import Error, LockLost

T = TypeVar("T")

__all__ = ["Guard", "LockCall", "Redlock"]


class Guard(_common.GuardBase):
    """A held lock (or a semaphore's permit). Renewed in the background
    while held.

    ``async with guard:`` releases it at the end and, if it is lost
    meanwhile, cancels the block and raises :class:`~quorumlock.LockLost`.
    """

    def __init__(self, inner: _quorumlock.Guard) -> None:
        super().__init__(inner)
        self._task: Optional[asyncio.Task] = None
        self._watcher: Optional[asyncio.Future] = None
        self._cancelled_for_loss = False

    def lost(self) -> Awaitable[None]:
        """Completes when the lock is lost (not when it is released)."""
        return self._inner.lost()

    async def extend(self, ttl: Seconds) -> None:
        """Extends the lock to ``ttl`` seconds from now on every node."""
        await self._inner.extend(False, ttl)

    async def release(self) -> Optional[Dict[str, Any]]:
        """Releases the lock on every node; returns the release report
        (``None`` if it was released before). The release runs to its end
        on quorumlock's runtime even if this call is cancelled."""
        return await self._inner.release(False)

    async def __aenter__(self) -> "Guard":
        self._task = asyncio.current_task()
        self._cancelled_for_loss = False
        self._watcher = asyncio.ensure_future(self._cancel_on_loss())
        return self

    async def _cancel_on_loss(self) -> None:
        await self._inner.lost()
        if self._task is not None and not self._inner.released:
            self._cancelled_for_loss = True
            self._task.cancel()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
        cancelled_for_loss = self._cancelled_for_loss
        loss: Optional[LockLost] = None
        if cancelled_for_loss or not (self._inner.released or self._inner.is_held()):
            try:
                self._inner.check()
            except LockLost as lost:
                loss = lost
        try:
            await self.release()
        except asyncio.CancelledError:
            # Our own cancellation, not yet delivered when the block ended:
            # it lands here. The release goes on in the background.
            if not cancelled_for_loss:
                raise
        except Error as failed:
            # A release no majority confirmed: the keys expire with their
            # ttl. It does not hide the block's own exception.
            if exc is None and loss is None:
                raise
            _common.note(exc or loss, f"and the release failed: {failed}")
        if cancelled_for_loss:
            uncancel = getattr(self._task, "uncancel", None)
            if uncancel is not None and uncancel() > 0:
                # Someone else cancelled the task too: theirs wins.
                return
            if exc_type is None or exc_type is asyncio.CancelledError:
                raise (loss or LockLost("lock lost")) from exc
        elif loss is not None and exc_type is None:
            raise loss


class LockCall:
    """``lock()``, ``try_lock()`` or ``semaphore()`` before it runs: await it
    for the guard, or use it in ``async with``."""

    def __init__(self, acquire: Callable[[], Awaitable[Optional[_quorumlock.Guard]]]) -> None:
        self._acquire = acquire
        self._guard: Optional[Guard] = None

    async def acquire(self) -> Optional[Guard]:
        """Takes the lock: the guard (``None`` for a ``try_`` call while
        another owner holds it)."""
        inner = await self._acquire()
        return None if inner is None else Guard(inner)

    def __await__(self) -> Generator[Any, None, Optional[Guard]]:
        return self.acquire().__await__()

    async def __aenter__(self) -> Optional[Guard]:
        self._guard = await self.acquire()
        if self._guard is None:
            return None
        return await self._guard.__aenter__()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        guard, self._guard = self._guard, None
        if guard is not None:
            await guard.__aexit__(exc_type, exc, tb)


class Redlock(_common.ClientBase):
    """A lock client for asyncio over Redis nodes (Redlock: a majority of
    independent nodes), Redis Cluster or Sentinel members, an etcd cluster
    (``etcd://``) or a ZooKeeper ensemble (``zk://``).

    ``nodes`` are URLs; the other arguments are the client's settings
    (durations in seconds or as ``timedelta``) and the lock settings every
    call starts from (``wait``, ``retry_delay``, ``max_attempts``,
    ``min_validity``, ``auto_renew``, ``fenced``, ``min_hold``,
    ``max_hold``, ``max_renewals``). Make one client per process and share
    it; close it with :meth:`aclose`.
    """

    def lock(self, resources: Resources, ttl: Seconds = DEFAULT_TTL, **options: Any) -> LockCall:
        """Takes ``resources`` (a name, or a list locked together) for
        ``ttl`` seconds, trying until ``wait`` runs out (``wait=0``: one
        attempt); raises :class:`~quorumlock.LockHeld` when it does."""
        options = _common.lock_options(options)
        return LockCall(lambda: self._client.lock(False, resources, ttl, **options))

    def try_lock(self, resources: Resources, ttl: Seconds = DEFAULT_TTL, **options: Any) -> LockCall:
        """One attempt at ``resources``: the guard, or ``None`` while another
        owner holds them."""
        options = _common.lock_options(options)
        return LockCall(lambda: self._client.try_lock(False, resources, ttl, **options))

    def semaphore(self, name: str, permits: int, ttl: Seconds = DEFAULT_TTL, **options: Any) -> LockCall:
        """One of ``permits`` places of the semaphore ``name`` (its guard's
        :attr:`Guard.index` says which), waiting as ``lock()`` does."""
        options = _common.lock_options(options)
        return LockCall(lambda: self._client.acquire_permit(False, name, permits, ttl, False, **options))

    def try_semaphore(self, name: str, permits: int, ttl: Seconds = DEFAULT_TTL, **options: Any) -> LockCall:
        """One attempt at a place of the semaphore ``name``: ``None`` when
        every place is taken."""
        options = _common.lock_options(options)
        return LockCall(lambda: self._client.acquire_permit(False, name, permits, ttl, True, **options))

    def synchronized(
        self, resource: Union[str, Callable[..., Resources]], ttl: Seconds = DEFAULT_TTL, **options: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorates a function so that each call runs under the lock of
        ``resource``, formatted with the call's arguments by name
        (``"report:{user_id}"``) or computed by a callable given them. An
        ``async def`` function runs in ``async with lock(...)`` (a loss
        cancels it); a plain function runs under the blocking call."""
        options = _common.lock_options(options)

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            if asyncio.iscoroutinefunction(function):

                @functools.wraps(function)
                async def locked(*args: Any, **kwargs: Any) -> Any:
                    name = _common.resource_for(resource, function, args, kwargs)
                    async with self.lock(name, ttl, **options):
                        return await function(*args, **kwargs)

                return locked
            from ._sync import Guard as SyncGuard

            @functools.wraps(function)
            def locked_sync(*args: Any, **kwargs: Any) -> Any:
                _common.refuse_on_event_loop("synchronized")
                name = _common.resource_for(resource, function, args, kwargs)
                with SyncGuard(self._client.lock(True, name, ttl, **options)):
                    return function(*args, **kwargs)

            return locked_sync

        return decorate

    async def idempotent(
        self,
        key: str,
        operation: Callable[[], Awaitable[Union[str, bytes]]],
        *,
        ttl: Seconds = DEFAULT_TTL,
        result_ttl: Optional[Seconds] = None,
        wait: Optional[Seconds] = None,
        cache_failures: bool = False,
        decode: bool = True,
    ) -> Union[str, bytes]:
        """Runs ``operation`` once for ``key`` however many callers ask: the
        first claims the key (for ``ttl``) and runs it, the others wait (at
        most ``wait``) and get the result it stored (kept ``result_ttl``).
        Returns the result as text (``decode=False``: bytes). An exception
        of the operation is raised to its caller; the next caller runs the
        operation again unless ``cache_failures``."""
        run = self._client.idempotency(key, ttl, result_ttl, wait, cache_failures)
        step = await run.next(False)
        if step is None:
            try:
                result = await operation()
            except BaseException as error:
                run.fail(f"{type(error).__name__}: {error}")
                try:
                    await run.next(False)
                except Exception:
                    pass
                raise
            run.succeed(result.encode() if isinstance(result, str) else bytes(result))
            step = await run.next(False)
        return step.decode() if decode else step

    async def inspect(self, resource: str) -> Dict[str, Any]:
        """What each node holds for ``resource``, and what a majority says:
        a dict with ``verdict`` (``"held"``, ``"free"``, ``"indeterminate"``),
        the holder's ``token`` and ``valid_for`` seconds, and ``nodes``."""
        return await self._client.inspect(False, resource)

    async def force_unlock(self, resource: str, token: Optional[str] = None) -> Dict[str, Any]:
        """Operator tool: deletes the lock of ``resource`` where it holds
        ``token`` (any holder's when ``None``), and reports per node."""
        return await self._client.force_unlock(False, resource, token)

    async def aclose(self, timeout: Seconds = DEFAULT_SHUTDOWN_TIMEOUT) -> Optional[Dict[str, Any]]:
        """Closes the client: releases every lock its guards still hold and
        waits for its background work (at most ``timeout``). Returns the
        shutdown report (``complete`` says nothing was left behind). Runs to
        its end even if this call is cancelled."""
        return await self._client.shutdown(False, timeout)

    async def __aenter__(self) -> "Redlock":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.aclose()
