//! What a Redis Cluster member needs on the wire: which server owns which
//! hash slots (`CLUSTER SLOTS`), and what a server's refusal to run a
//! command for a slot it does not own says.

use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::keys::SLOTS;
use super::reply::unexpected;
use super::request::Request;

/// The primaries of a cluster and their slots: `CLUSTER SLOTS`. Replicas
/// are left out: locks are written and read on primaries only.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClusterSlots;

/// A range of slots and the primary that serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotRange {
    /// The first and last slot, inclusive.
    pub(crate) first: u16,
    pub(crate) last: u16,
    /// The primary's address as the cluster announces it; `None` when it
    /// announces none (a server that does not know its own address answers
    /// with an empty host: it is the server that was asked).
    pub(crate) host: Option<String>,
    pub(crate) port: u16,
}

impl Request for ClusterSlots {
    type Reply = Vec<SlotRange>;

    fn command(&self) -> Cmd {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        cmd
    }

    /// Each entry: `[first, last, [host, port, id, ...], replicas...]`.
    fn parse(&self, reply: Value) -> RedisResult<Vec<SlotRange>> {
        let reply = reply.extract_error()?;
        let Value::Array(entries) = &reply else {
            return Err(unexpected("CLUSTER SLOTS", &reply));
        };
        entries
            .iter()
            .map(|entry| slot_range(entry).ok_or_else(|| unexpected("CLUSTER SLOTS", &reply)))
            .collect()
    }
}

fn slot_range(entry: &Value) -> Option<SlotRange> {
    let Value::Array(parts) = entry else {
        return None;
    };
    let (Value::Int(first), Value::Int(last), Value::Array(primary)) =
        (parts.first()?, parts.get(1)?, parts.get(2)?)
    else {
        return None;
    };
    let host = match primary.first()? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
        Value::SimpleString(text) => text.clone(),
        Value::Nil => String::new(),
        _ => return None,
    };
    let Value::Int(port) = primary.get(1)? else {
        return None;
    };
    let slot = |n: i64| u16::try_from(n).ok().filter(|&s| s < SLOTS);
    let (first, last) = (slot(*first)?, slot(*last)?);
    (first <= last).then_some(SlotRange {
        first,
        last,
        host: (!host.is_empty() && host != "?").then_some(host),
        port: u16::try_from(*port).ok()?,
    })
}

/// The slot and the server a `MOVED` refusal names: the slot now lives
/// there, for good (unlike `ASK`, which names where one key is while its
/// slot migrates).
pub(crate) fn moved_to(error: &RedisError) -> Option<(u16, String)> {
    if error.kind() != ErrorKind::Server(ServerErrorKind::Moved) {
        return None;
    }
    let (address, slot) = error.redirect_node()?;
    Some((slot, address.to_owned()))
}

/// Whether a server refused a command because of where its slot is or how
/// the cluster is doing (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`): the
/// command did not run.
pub(crate) fn refused_for_slot(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(n: i64) -> Value {
        Value::Int(n)
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn slot_ranges_are_read_with_their_primary_only() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                int(0),
                int(5460),
                Value::Array(vec![bulk("127.0.0.1"), int(7000), bulk("id1")]),
                Value::Array(vec![bulk("127.0.0.1"), int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![
                int(5461),
                int(16383),
                Value::Array(vec![bulk(""), int(7001), bulk("id2")]),
            ]),
        ]);
        let ranges = ClusterSlots.parse(reply).unwrap();
        assert_eq!(
            ranges,
            [
                SlotRange {
                    first: 0,
                    last: 5460,
                    host: Some("127.0.0.1".into()),
                    port: 7000
                },
                SlotRange {
                    first: 5461,
                    last: 16383,
                    host: None,
                    port: 7001
                },
            ]
        );
        let beyond = Value::Array(vec![Value::Array(vec![
            int(0),
            int(16384),
            Value::Array(vec![bulk("h"), int(1)]),
        ])]);
        assert!(ClusterSlots.parse(beyond).is_err());
    }

    #[test]
    fn only_moved_says_where_a_slot_now_lives() {
        let moved = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "An error was signalled by the server",
            "3999 127.0.0.1:6381".to_owned(),
        ));
        assert_eq!(moved_to(&moved), Some((3999, "127.0.0.1:6381".to_owned())));
        assert!(refused_for_slot(&moved));
        let ask = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Ask),
            "An error was signalled by the server",
            "3999 127.0.0.1:6381".to_owned(),
        ));
        assert_eq!(moved_to(&ask), None);
        assert!(refused_for_slot(&ask));
    }
}
