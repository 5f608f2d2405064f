"""What the blocking and the asyncio clients share: the client's settings,
the decorator's resource names, and the check that keeps blocking calls off
an event loop's thread."""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _quorumlock
from ._errors import ConfigError

#: A duration: float seconds, or a ``timedelta``.
Seconds = Union[float, int, timedelta]
#: One resource name, or several locked together.
Resources = Union[str, Sequence[str]]

#: The ttl when none is given (seconds).
DEFAULT_TTL: float = _quorumlock.DEFAULT_TTL
#: How long ``lock()`` keeps trying by default (seconds).
DEFAULT_WAIT: float = _quorumlock.DEFAULT_WAIT
#: How long ``close()`` / ``aclose()`` waits for releases by default.
DEFAULT_SHUTDOWN_TIMEOUT: float = _quorumlock.DEFAULT_SHUTDOWN_TIMEOUT

#: The lock settings a call may change (keyword arguments of ``lock()``,
#: ``try_lock()``, ``semaphore()``, ``synchronized()`` and the client).
LOCK_SETTINGS = (
    "wait",
    "retry_delay",
    "max_attempts",
    "min_validity",
    "auto_renew",
    "fenced",
    "min_hold",
    "max_hold",
    "max_renewals",
)


def make_client(nodes: Optional[Sequence[str]], from_env: bool, settings: Dict[str, Any]) -> _quorumlock.Client:
    """The extension's client, with the arguments checked by name."""
    if isinstance(nodes, str):
        nodes = [nodes]
    return _quorumlock.Client(None if nodes is None else list(nodes), from_env=from_env, **settings)


def lock_options(options: Dict[str, Any]) -> Dict[str, Any]:
    """The call's lock settings, refusing unknown names."""
    for name in options:
        if name not in LOCK_SETTINGS:
            error = ConfigError(f"unknown lock setting {name!r} (known: {', '.join(LOCK_SETTINGS)})")
            error.setting = name
            raise error
    return {name: value for name, value in options.items() if value is not None}


def refuse_on_event_loop(call: str) -> None:
    """Raises when a blocking call is made on a thread that runs an event
    loop: it would stall every task of that loop (and deadlock one that the
    call waits for)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"quorumlock.Redlock.{call}() blocks, and this thread runs an asyncio event loop: "
        "use quorumlock.asyncio.Redlock in async code"
    )


def resource_for(
    resource: Union[str, Callable[..., Resources]],
    function: Callable[..., Any],
    args: tuple,
    kwargs: Dict[str, Any],
) -> Resources:
    """The resource a decorated call locks: ``resource`` formatted with the
    call's arguments by name (``"report:{user_id}"``), or a callable given
    the same arguments as the function."""
    if callable(resource):
        return resource(*args, **kwargs)
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    try:
        return resource.format(**bound.arguments)
    except (KeyError, IndexError) as missing:
        error = ConfigError(f"the resource {resource!r} names {missing}, which is no argument of {function.__qualname__}")
        error.setting = "resource"
        raise error from None


def not_picklable(kind: str):
    """A ``__reduce__`` that refuses: a client's connections and renewals,
    and a guard's lock, belong to the process that made them."""

    def __reduce__(self):
        raise TypeError(f"a quorumlock {kind} cannot be pickled: it belongs to the process that made it")

    return __reduce__


def note(error: BaseException, text: str) -> None:
    """Adds ``text`` to the traceback of ``error`` (Python 3.11+; before,
    nothing)."""
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(text)


class ClientBase:
    """What the blocking and the asyncio clients share: their settings and
    what they say about themselves. Each adds its calls."""

    __reduce__ = not_picklable("client")

    def __init__(
        self,
        nodes: Optional[Sequence[str]] = None,
        *,
        node_timeout: Optional[Seconds] = None,
        connect_timeout: Optional[Seconds] = None,
        drift_factor: Optional[float] = None,
        drift_fixed: Optional[Seconds] = None,
        heal: Optional[bool] = None,
        batching: Optional[bool] = None,
        replica_ack: Optional[int] = None,
        _from_env: bool = False,
        **lock_settings: Any,
    ) -> None:
        settings = dict(
            node_timeout=node_timeout,
            connect_timeout=connect_timeout,
            drift_factor=drift_factor,
            drift_fixed=drift_fixed,
            heal=heal,
            batching=batching,
            replica_ack=replica_ack,
        )
        settings.update(lock_options(lock_settings))
        self._client = make_client(nodes, _from_env, settings)

    @classmethod
    def from_env(cls, **settings: Any):
        """A client from ``QUORUMLOCK_NODES`` and the other ``QUORUMLOCK_*``
        variables (those of the Rust client), then ``settings``."""
        return cls(None, _from_env=True, **settings)

    @property
    def nodes(self) -> int:
        """Nodes configured (1 for an etcd cluster or a ZooKeeper ensemble)."""
        return self._client.nodes

    @property
    def quorum(self) -> int:
        """Nodes that must agree."""
        return self._client.quorum


class GuardBase:
    """What the blocking and the asyncio guards share: what the lock is
    and whether it is still held. Each adds its calls."""

    __reduce__ = not_picklable("guard")

    def __init__(self, inner: _quorumlock.Guard) -> None:
        self._inner = inner

    @property
    def token(self) -> str:
        """The owner token stored on every node."""
        return self._inner.token

    @property
    def fence(self) -> Optional[int]:
        """The fencing token (grows with every holder), or ``None`` when the
        lock was taken without ``fenced=True``."""
        return self._inner.fence

    @property
    def resources(self) -> List[str]:
        """The names locked."""
        return self._inner.resources

    @property
    def index(self) -> Optional[int]:
        """A semaphore permit's place (0 to permits - 1); ``None`` for a lock."""
        return self._inner.index

    @property
    def remaining(self) -> float:
        """Seconds the lock is still trustworthy unless renewed (0.0 once lost)."""
        return self._inner.remaining

    def is_held(self) -> bool:
        """Whether the lock is still held: not lost, not released, in time."""
        return self._inner.is_held()

    def check(self) -> None:
        """Raises :class:`~quorumlock.LockLost` if the lock was lost (not when
        it was released): call it between the steps of long work."""
        self._inner.check()

    def __repr__(self) -> str:
        return repr(self._inner)
