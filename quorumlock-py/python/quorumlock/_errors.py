"""The exceptions of quorumlock: one hierarchy, rooted at :class:`Error`."""

from __future__ import annotations

from typing import List, Optional


class Error(Exception):
    """Base of every error quorumlock raises."""


class LockHeld(Error):
    """Another owner holds the resource: the wait (or the one attempt of
    ``wait=0``) ended without a majority. Busy, not an outage."""

    #: Nodes that answered "held by someone else".
    refused: Optional[int] = None
    #: Nodes configured.
    nodes: Optional[int] = None
    #: The nodes that failed meanwhile, each as text.
    node_errors: List[str] = []


class LockLost(Error):
    """The lock is no longer ours on a majority of nodes, or its validity
    ran out. Work done under it since may overlap another holder's: this is
    what fencing tokens guard against."""

    #: Nodes that still confirmed our token.
    confirmed: Optional[int] = None
    #: Nodes needed for a majority.
    quorum: Optional[int] = None
    #: Nodes configured.
    nodes: Optional[int] = None


class QuorumUnreachable(Error, ConnectionError):
    """Too many nodes failed or timed out to confirm a majority (also a
    :class:`ConnectionError`)."""

    #: Nodes that confirmed the operation.
    succeeded: Optional[int] = None
    #: Nodes that answered but refused.
    refused: Optional[int] = None
    #: Nodes needed for a majority.
    quorum: Optional[int] = None
    #: Nodes configured.
    nodes: Optional[int] = None
    #: What went wrong on each failing node, as text.
    node_errors: List[str] = []


class ValidityUsedUp(Error):
    """A majority was reached, but so late that too little validity was
    left; the keys were given back."""

    #: Seconds the attempt took.
    elapsed: Optional[float] = None
    #: The ttl asked for, in seconds.
    ttl: Optional[float] = None
    #: The least validity required, in seconds.
    min_validity: Optional[float] = None


class ConfigError(Error, ValueError):
    """A bad setting or argument (also a :class:`ValueError`): fix the call,
    retrying will not help. :attr:`setting` names it."""

    #: The keyword argument (or environment variable) at fault.
    setting: Optional[str] = None


class ClientClosed(Error):
    """The client was closed (``close()`` / ``aclose()``), or it was made in
    the parent of this forked process: make a new client here."""


class IdempotencyInProgress(Error):
    """Another caller is running the operation of this idempotency key and
    did not finish within the wait."""


class CachedFailure(Error):
    """The operation of this idempotency key failed earlier, and its
    failure was kept (``cache_failures=True``)."""


__all__ = [
    "CachedFailure",
    "ClientClosed",
    "ConfigError",
    "Error",
    "IdempotencyInProgress",
    "LockHeld",
    "LockLost",
    "QuorumUnreachable",
    "ValidityUsedUp",
]
