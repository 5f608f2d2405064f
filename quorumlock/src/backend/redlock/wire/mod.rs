//! The wire layer: the only place that knows Redis commands.
//!
//! Every request the library sends to a lock node is a type here that
//! implements [`Request`]: it builds its command and parses the reply to
//! it, next to the Lua script it calls (if any), so that what is sent and
//! what is expected back are written once, together. Replies are typed
//! ([`Acquired`](lock::Acquired), [`RenewStatus`](renew::RenewStatus), ...); a reply of the wrong shape is an
//! error of that node, never a yes.
//!
//! Every key a script touches is passed in `KEYS`, and every key the
//! library derives from a resource shares the resource's hash slot
//! ([`keys`]), so that a script's keys are all on one Redis Cluster shard.
//! The lock key itself is the resource name as given: the wire format other
//! Redlock libraries share.
//!
//! # Scripts
//!
//! Each script runs atomically on one node (Redis runs a script without
//! interleaving other commands), which is what makes an owner check and the
//! action that follows it one indivisible step. They are called with
//! `EVALSHA`, and loaded ([`load_all`]) on every new connection before any
//! request is handed to it (the node layer does this under its ordering
//! lock). A node's script cache lives as long as the server process, and a
//! server that restarted is reached through a new connection, so every
//! request finds its script loaded. The usual alternative, `EVALSHA` with a
//! reload on `NOSCRIPT` (`redis::Script`), is unsafe here: the reload is a
//! second and third command, sent only if the caller keeps polling, and the
//! quorum layer stops polling a node once the outcome is certain, so on a
//! node that had just restarted a release could silently never run, or
//! overtake the acquire it was meant to undo. `EVALSHA` instead of `EVAL`
//! also saves sending and hashing the script text on every call.
//!
//! # Bounded work
//!
//! Redis serves no one else while a script runs, so every call does a
//! bounded amount of work, whatever the data on the node. Each script names
//! the bound it relies on: per-lock scripts loop over one lock's keys (at
//! most [`MAX_LOCK_KEYS`]); the batch scripts over at most
//! [`BATCH_MAX`](batch::BATCH_MAX) requests; renewal over at most
//! [`RENEW_CHUNK_KEYS`](renew::RENEW_CHUNK_KEYS) keys per call; the hand-off
//! queues, which anyone may fill, at most
//! [`ANNOUNCE_SCAN`](queue::ANNOUNCE_SCAN) entries per release.

pub(crate) mod batch;
pub(crate) mod clock;
pub(crate) mod cluster;
pub(crate) mod commands;
pub(crate) mod fence;
pub(crate) mod idempotency;
pub(crate) mod inspect;
pub(crate) mod keys;
pub(crate) mod lock;
pub(crate) mod probe;
pub(crate) mod queue;
pub(crate) mod renew;
pub(crate) mod replica;
mod reply;
mod request;
mod script;

use redis::{RedisResult, Value};

pub(crate) use self::reply::{millis, wrong_reply_count};
pub(crate) use self::request::Request;
pub(crate) use self::script::MAX_LOCK_KEYS;

/// Every script a lock node runs: all but the fenced write, which runs on
/// the caller's own data store. A node connection loads them all
/// ([`load_all`]), and `quorumlock check` probes every command they call
/// ([`commands`]); a test keeps every `script!` of this layer listed.
pub(crate) static SCRIPTS: &[&script::Script] = &[
    &lock::ACQUIRE,
    &lock::RELEASE,
    &lock::EXTEND,
    &renew::RENEW,
    &idempotency::CLAIM,
    &idempotency::STORE,
    &fence::FENCED_ACQUIRE,
    &fence::PROPOSE,
    &batch::BATCH,
    &batch::BATCH_IN_ORDER,
    &queue::REGISTER,
    &queue::UNREGISTER,
    &queue::ACQUIRE_OR_QUEUE,
    &queue::FENCED_ACQUIRE_OR_QUEUE,
    &inspect::INSPECT,
    &inspect::FORCE_DELETE,
];

/// `SCRIPT LOAD` of every script a node connection must have loaded
/// ([`SCRIPTS`]), as one pipeline.
pub(crate) fn load_all() -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for script in SCRIPTS {
        pipe.add_command(script.load());
    }
    pipe
}

/// Whether the replies to [`load_all`] all succeeded; the first error if not.
pub(crate) fn check_loaded(replies: Vec<Value>) -> RedisResult<()> {
    match replies.into_iter().find_map(|v| v.extract_error().err()) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No script builds a key name of its own: every key it touches comes
    /// in `KEYS` (the channel prefix is the only name a script writes).
    #[test]
    fn scripts_take_every_key_in_keys() {
        for script in [
            &lock::RELEASE,
            &batch::BATCH,
            &batch::BATCH_IN_ORDER,
            &inspect::FORCE_DELETE,
        ] {
            assert!(!script.source.contains("quorumlock:waiters:"));
            assert!(!script.source.contains("quorumlock:fence"));
            assert!(script.source.contains(&format!("'{}'", keys::WAKE_PREFIX)));
        }
    }

    /// Not a check: writes the scripts the nodes run, as `<name>.lua`, into
    /// the directory `QUORUMLOCK_SCRIPTS_DIR` names, for
    /// `bench/node-instructions.py`, which counts what each costs a node.
    #[test]
    #[ignore = "a tool for bench/node-instructions.py, not a check"]
    fn write_scripts() {
        let dir = std::env::var("QUORUMLOCK_SCRIPTS_DIR").expect("QUORUMLOCK_SCRIPTS_DIR names a directory");
        for (name, script) in [
            ("release", &lock::RELEASE),
            ("batch", &batch::BATCH),
            ("fenced_acquire", &fence::FENCED_ACQUIRE),
            ("propose", &fence::PROPOSE),
        ] {
            let path = std::path::Path::new(&dir).join(format!("{name}.lua"));
            std::fs::write(&path, script.source).expect("the directory is writable");
        }
    }

    /// Every script that announces a release carries the announcement's
    /// limits as the constants give them.
    #[test]
    fn announcing_scripts_carry_the_limits() {
        let limits = format!(
            "local announce_scan, announce_budget = {}, {}\n",
            queue::ANNOUNCE_SCAN,
            queue::ANNOUNCE_BUDGET
        );
        for script in [
            &lock::RELEASE,
            &batch::BATCH,
            &batch::BATCH_IN_ORDER,
            &inspect::FORCE_DELETE,
        ] {
            assert!(script.source.contains(&limits));
        }
    }
}
