"""The blocking client: :class:`Redlock` for threads (Flask, Django, scripts,
workers).

A blocking call releases the GIL while it waits and wakes regularly for
Python's signal handlers (Ctrl-C interrupts a long wait and gives back
what the call had taken). A thread in the middle of its critical section
cannot be interrupted when the lock is lost: call :meth:`Guard.check`
between steps, and the ``with`` block raises :class:`~quorumlock.LockLost`
at its end if the lock was lost during it.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, Dict, Optional, Union

from . import _common, _quorumlock
from ._common import DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_TTL, Resources, Seconds
from ._errors import Error, LockLost

__all__ = ["Guard", "LockCall", "Redlock"]


class Guard(_common.GuardBase):
    """A held lock (or a semaphore's permit), renewed in the background
    while held. ``with guard:`` releases it at the end, and raises
    :class:`~quorumlock.LockLost` there if it was lost during the block."""

    def wait_lost(self, timeout: Optional[Seconds] = None) -> bool:
        """Blocks until the lock is lost or ``timeout`` seconds pass;
        returns whether it was lost."""
        _common.refuse_on_event_loop("wait_lost")
        return self._inner.wait_lost(timeout)

    def extend(self, ttl: Seconds) -> None:
        """Extends the lock to ``ttl`` seconds from now on every node."""
        _common.refuse_on_event_loop("extend")
        self._inner.extend(True, ttl)

    def release(self) -> Optional[Dict[str, Any]]:
        """Releases the lock on every node; returns the release report
        (``None`` if it was released before)."""
        _common.refuse_on_event_loop("release")
        return self._inner.release(True)

    def __enter__(self) -> "Guard":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        loss: Optional[LockLost] = None
        try:
            self._inner.check()
        except LockLost as lost:
            loss = lost
        try:
            self.release()
        except Error as failed:
            # A release no majority confirmed: the keys expire with their
            # ttl. It does not hide the block's own exception.
            if exc is None and loss is None:
                raise
            _common.note(exc or loss, f"and the release failed: {failed}")
        if loss is not None and exc_type is None:
            raise loss


class LockCall:
    """``lock()``, ``try_lock()`` or ``semaphore()`` before it runs: call
    :meth:`acquire` for the guard, or use it in ``with``."""

    def __init__(self, acquire: Callable[[], Optional[_quorumlock.Guard]], call: str) -> None:
        self._acquire = acquire
        self._call = call
        self._guard: Optional[Guard] = None

    def acquire(self) -> Optional[Guard]:
        """Takes the lock: the guard (``None`` for a ``try_`` call while
        another owner holds it)."""
        _common.refuse_on_event_loop(self._call)
        inner = self._acquire()
        return None if inner is None else Guard(inner)

    def __enter__(self) -> Optional[Guard]:
        self._guard = self.acquire()
        return self._guard

    def __exit__(self, exc_type, exc, tb) -> None:
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.__exit__(exc_type, exc, tb)


class Redlock(_common.ClientBase):
    """A blocking lock client over Redis nodes (Redlock: a majority of
    independent nodes), Redis Cluster or Sentinel members, an etcd cluster
    (``etcd://``) or a ZooKeeper ensemble (``zk://``).

    The arguments are those of :class:`quorumlock.asyncio.Redlock`. Make one
    client per process, share it between threads, and close it with
    :meth:`close` (or ``with Redlock(...) as locks:``).
    """

    def lock(self, resources: Resources, ttl: Seconds = DEFAULT_TTL, **options: Any) -> LockCall:
        """Takes ``resources`` (a name, or a list locked together) for
        ``ttl`` seconds, trying until ``wait`` runs out (``wait=0``: one
        attempt); raises :class:`~quorumlock.LockHeld` when it does."""
        options = _common.lock_options(options)
        return LockCall(lambda: self._client.lock(True, resources, ttl, **options), "lock")

    def try_lock(self, resources: Resources, ttl: Seconds = DEFAULT_TTL, **options: Any) -> LockCall:
        """One attempt at ``resources``: the guard, or ``None`` while another
        owner holds them."""
        options = _common.lock_options(options)
        return LockCall(lambda: self._client.try_lock(True, resources, ttl, **options), "try_lock")

    def semaphore(self, name: str, permits: int, ttl: Seconds = DEFAULT_TTL, **options: Any) -> LockCall:
        """One of ``permits`` places of the semaphore ``name`` (its guard's
        :attr:`Guard.index` says which), waiting as ``lock()`` does."""
        options = _common.lock_options(options)
        return LockCall(
            lambda: self._client.acquire_permit(True, name, permits, ttl, False, **options), "semaphore"
        )

    def try_semaphore(self, name: str, permits: int, ttl: Seconds = DEFAULT_TTL, **options: Any) -> LockCall:
        """One attempt at a place of the semaphore ``name``: ``None`` when
        every place is taken."""
        options = _common.lock_options(options)
        return LockCall(
            lambda: self._client.acquire_permit(True, name, permits, ttl, True, **options), "try_semaphore"
        )

    def synchronized(
        self, resource: Union[str, Callable[..., Resources]], ttl: Seconds = DEFAULT_TTL, **options: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorates a function so that each call runs under the lock of
        ``resource``, formatted with the call's arguments by name
        (``"report:{user_id}"``) or computed by a callable given them. An
        ``async def`` function is locked with the asyncio calls (a loss
        cancels it), a plain one with the blocking calls."""
        from .asyncio import Guard as AsyncGuard

        options = _common.lock_options(options)

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            if asyncio.iscoroutinefunction(function):

                @functools.wraps(function)
                async def locked(*args: Any, **kwargs: Any) -> Any:
                    name = _common.resource_for(resource, function, args, kwargs)
                    async with AsyncGuard(await self._client.lock(False, name, ttl, **options)):
                        return await function(*args, **kwargs)

                return locked

            @functools.wraps(function)
            def locked_sync(*args: Any, **kwargs: Any) -> Any:
                name = _common.resource_for(resource, function, args, kwargs)
                with self.lock(name, ttl, **options):
                    return function(*args, **kwargs)

            return locked_sync

        return decorate

    def idempotent(
        self,
        key: str,
        operation: Callable[[], Union[str, bytes]],
        *,
        ttl: Seconds = DEFAULT_TTL,
        result_ttl: Optional[Seconds] = None,
        wait: Optional[Seconds] = None,
        cache_failures: bool = False,
        decode: bool = True,
    ) -> Union[str, bytes]:
        """Runs ``operation`` once for ``key`` however many callers ask (see
        :meth:`quorumlock.asyncio.Redlock.idempotent`)."""
        _common.refuse_on_event_loop("idempotent")
        run = self._client.idempotency(key, ttl, result_ttl, wait, cache_failures)
        step = run.next(True)
        if step is None:
            try:
                result = operation()
            except BaseException as error:
                run.fail(f"{type(error).__name__}: {error}")
                try:
                    run.next(True)
                except Exception:
                    pass
                raise
            run.succeed(result.encode() if isinstance(result, str) else bytes(result))
            step = run.next(True)
        return step.decode() if decode else step

    def inspect(self, resource: str) -> Dict[str, Any]:
        """What each node holds for ``resource``, and what a majority says
        (see :meth:`quorumlock.asyncio.Redlock.inspect`)."""
        _common.refuse_on_event_loop("inspect")
        return self._client.inspect(True, resource)

    def force_unlock(self, resource: str, token: Optional[str] = None) -> Dict[str, Any]:
        """Operator tool: deletes the lock of ``resource`` where it holds
        ``token`` (any holder's when ``None``), and reports per node."""
        _common.refuse_on_event_loop("force_unlock")
        return self._client.force_unlock(True, resource, token)

    def close(self, timeout: Seconds = DEFAULT_SHUTDOWN_TIMEOUT) -> Optional[Dict[str, Any]]:
        """Closes the client: releases every lock its guards still hold and
        waits for its background work (at most ``timeout``). Returns the
        shutdown report (``complete`` says nothing was left behind)."""
        _common.refuse_on_event_loop("close")
        return self._client.shutdown(True, timeout)

    def __enter__(self) -> "Redlock":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
