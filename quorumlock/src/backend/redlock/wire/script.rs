//! Lua scripts as the nodes run them: by SHA1, loaded on every connection.

use std::sync::LazyLock;

use redis::Cmd;

/// A lock script: its source and SHA1, by which it is called.
pub(crate) struct Script {
    pub(crate) source: &'static str,
    sha: LazyLock<String>,
}

impl Script {
    pub(crate) const fn new(source: &'static str, hash: fn() -> String) -> Script {
        Script {
            source,
            sha: LazyLock::new(hash),
        }
    }

    /// The `SCRIPT LOAD` of this script, which every `EVALSHA` of it relies on.
    pub(crate) fn load(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source);
        cmd
    }

    /// An `EVALSHA` of this script with `key_count` keys; append the keys,
    /// then the `ARGV` values, with `arg`.
    pub(crate) fn begin(&self, key_count: usize) -> Cmd {
        let mut cmd = command("EVALSHA");
        cmd.arg(&*self.sha).arg(key_count);
        cmd
    }

    /// An `EVALSHA` of this script with `keys` in `KEYS` (`key_count` of
    /// them, more may follow); append the `ARGV` values with `arg`.
    pub(crate) fn call<K: redis::ToRedisArgs>(&self, key_count: usize, keys: K) -> Cmd {
        let mut cmd = command("EVALSHA");
        cmd.arg(&*self.sha).arg(key_count).arg(keys);
        cmd
    }
}

/// Room for the arguments of a usual lock command, allocated up front.
///
/// A command grows its buffers as arguments are appended, and growing from
/// empty reallocates several times per command, a measurable share of the
/// client's instructions per lock+unlock cycle (docs/benchmarks.md, client
/// instructions). A single-key acquire or release (name, SHA, key count,
/// key, queue key, token, clock) fits these sizes; larger commands grow
/// from there.
const COMMAND_ARGS: usize = 16;
/// See [`COMMAND_ARGS`].
const COMMAND_BYTES: usize = 256;

/// The command `name`, with room for a usual lock command's arguments (see
/// [`COMMAND_ARGS`]); append them with `arg`.
pub(crate) fn command(name: &str) -> Cmd {
    let mut cmd = Cmd::with_capacity(COMMAND_ARGS, COMMAND_BYTES);
    cmd.arg(name);
    cmd
}

/// Declares a [`Script`] static from a source expression.
macro_rules! script {
    ($(#[$doc:meta])* $name:ident = $source:expr;) => {
        $(#[$doc])*
        pub(crate) static $name: $crate::backend::redlock::wire::script::Script = $crate::backend::redlock::wire::script::Script::new($source, || {
            redis::Script::new($source).get_hash().to_owned()
        });
    };
}
pub(crate) use script;

/// The most keys one lock may have: bounds the work of every per-lock
/// script, each of which touches every key of its lock (and the keys derived
/// from it) a constant number of times, and keeps one lock within a renewal
/// call (`renew::RENEW_CHUNK_KEYS`). Sixty-four keys keep each of them in
/// the tens of microseconds. The client's per-lock resource limit must not
/// exceed it.
pub(crate) const MAX_LOCK_KEYS: usize = 64;

// The scripts' documented bounds assume no lock has more keys than this.
const _: () = assert!(crate::lock::resources::MAX_RESOURCES <= MAX_LOCK_KEYS);
