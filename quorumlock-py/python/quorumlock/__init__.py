"""quorumlock: distributed locks that stay safe when machines die.

Redlock over independent Redis nodes (a majority must agree), Redis
Cluster and Sentinel members, an etcd cluster or a ZooKeeper ensemble,
behind one API; renewed in the background, with fencing tokens and a loss
signal. The engine is the Rust library quorumlock.

::

    import quorumlock

    locks = quorumlock.Redlock(["redis://127.0.0.1:6379"])
    with locks.lock("archive:nightly", ttl=60, wait=0) as guard:
        ...  # raises quorumlock.LockHeld when another process runs it
    locks.close()

For asyncio, :mod:`quorumlock.asyncio` has the same client with
``async with``.
"""

from ._common import DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_TTL, DEFAULT_WAIT
from ._errors import (
    CachedFailure,
    ClientClosed,
    ConfigError,
    Error,
    IdempotencyInProgress,
    LockHeld,
    LockLost,
    QuorumUnreachable,
    ValidityUsedUp,
)
from ._quorumlock import enable_metrics, render_metrics
from ._sync import Guard, LockCall, Redlock

__all__ = [
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "DEFAULT_TTL",
    "DEFAULT_WAIT",
    "CachedFailure",
    "ClientClosed",
    "ConfigError",
    "Error",
    "Guard",
    "IdempotencyInProgress",
    "LockCall",
    "LockHeld",
    "LockLost",
    "QuorumUnreachable",
    "Redlock",
    "ValidityUsedUp",
    "enable_metrics",
    "render_metrics",
]
