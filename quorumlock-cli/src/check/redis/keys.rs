//! `check --key K`: what each node holds under a lock key.
//!
//! A key set without a ttl (by a writer that is not a lock, or a lock
//! written without `PX`) never expires: `SET NX` is refused on that node
//! until someone deletes it, and if a majority holds one, the lock can never
//! be taken. Other data under the name (a hash, a list) is as bad.

use std::time::Duration;

use quorumlock::probe::{PTTL, TYPE};
use redis::aio::MultiplexedConnection;

use super::access;
use super::command::query;
use crate::check::Report;
use crate::duration::show;

/// What one node holds under a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::check) enum State {
    Absent,
    /// A string with a ttl: a lock, held until then.
    Held,
    /// A string that never expires: it blocks the lock forever.
    HeldWithoutTtl,
    /// Not a string: other data uses the name.
    WrongType,
    /// The node could not be asked (permission, error).
    Unknown,
}

impl State {
    /// The name used in JSON output (stable).
    pub(in crate::check) fn name(self) -> &'static str {
        match self {
            State::Absent => "absent",
            State::Held => "held",
            State::HeldWithoutTtl => "held_without_ttl",
            State::WrongType => "wrong_type",
            State::Unknown => "unknown",
        }
    }
}

/// One key on one node.
#[derive(Clone, Debug)]
pub(in crate::check) struct KeyState {
    pub(in crate::check) key: String,
    pub(in crate::check) state: State,
    /// Redis's name for the value's type, when the key exists.
    pub(in crate::check) kind: Option<String>,
    /// The remaining ttl in milliseconds, when it has one.
    pub(in crate::check) ttl_ms: Option<i64>,
}

impl KeyState {
    /// The state as the human table shows it.
    pub(in crate::check) fn describe(&self) -> String {
        match (self.state, self.ttl_ms) {
            (State::Held, Some(ms)) => {
                format!(
                    "held (ttl {})",
                    show(Duration::from_millis(ms.max(0).unsigned_abs()))
                )
            }
            (State::Held, None) => "held".into(),
            (State::HeldWithoutTtl, _) => "held WITHOUT a ttl".into(),
            (State::WrongType, _) => format!("a {}, not a lock", self.kind.as_deref().unwrap_or("?")),
            (State::Absent, _) => "absent".into(),
            (State::Unknown, _) => "unknown".into(),
        }
    }
}

/// Looks at every key in `keys` on the node; a key it cannot read is
/// reported and marked unknown.
pub(super) async fn inspect(
    conn: &mut MultiplexedConnection,
    limit: Duration,
    keys: &[String],
    report: &mut Report,
) -> redis::RedisResult<()> {
    for key in keys {
        let (mut kind, mut pttl) = (TYPE.cmd(), PTTL.cmd());
        kind.arg(key);
        pttl.arg(key);
        let reply = match query::<String>(conn, limit, kind).await {
            Ok(kind) => query::<i64>(conn, limit, pttl).await.map(|ttl| (kind, ttl)),
            Err(e) => Err(e),
        };
        let (kind, ttl) = match reply {
            Ok(reply) => reply,
            Err(e) if access::is_denied(&e) => {
                report.warn(
                    "key_unreadable",
                    format!("key {key:?}: the user may not read it ({e}); its state is unknown"),
                );
                report.keys.push(unknown(key));
                continue;
            }
            Err(e) => return Err(e),
        };
        // A key that vanished between TYPE and PTTL is absent.
        let state = match (kind.as_str(), ttl) {
            ("none", _) | (_, -2) => State::Absent,
            ("string", -1) => State::HeldWithoutTtl,
            ("string", _) => State::Held,
            _ => State::WrongType,
        };
        match state {
            State::HeldWithoutTtl => report.error(
                "key_without_ttl",
                format!(
                    "key {key:?} holds a value without a ttl: no lock on it can be taken on this node until \
                     someone deletes it (a writer that is not a lock, or a lock set without PX); if no one \
                     holds it, delete it"
                ),
            ),
            State::WrongType => report.error(
                "key_wrong_type",
                format!(
                    "key {key:?} holds a {kind}, not a lock: other data uses this name, so the lock cannot \
                     be taken on this node; use another resource name"
                ),
            ),
            _ => {}
        }
        report.keys.push(KeyState {
            key: key.clone(),
            state,
            kind: (state != State::Absent).then_some(kind),
            ttl_ms: (ttl >= 0).then_some(ttl),
        });
    }
    Ok(())
}

/// Marks every key of `keys` that the node was not asked about (it was
/// unreachable, or failed first) as unknown, so that every node lists
/// every key.
pub(super) fn fill_unknown(report: &mut Report, keys: &[String]) {
    for key in keys {
        if !report.keys.iter().any(|k| &k.key == key) {
            report.keys.push(unknown(key));
        }
    }
}

fn unknown(key: &str) -> KeyState {
    KeyState {
        key: key.to_owned(),
        state: State::Unknown,
        kind: None,
        ttl_ms: None,
    }
}
