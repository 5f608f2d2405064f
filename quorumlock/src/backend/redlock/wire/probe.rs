//! How to try, as a node's user, every command the library sends a node
//! ([`COMMANDS`]), as `quorumlock check` does.
//!
//! Redis checks a script's commands against the caller's ACL one by one as
//! they run, so the commands the scripts run are tried inside one probe
//! script ([`Probe::run`]), each under `pcall`: one denial does not hide the
//! next. The others are sent alone, built as the library builds them
//! ([`Probe::set`], [`wait`], [`time`], [`Command::cmd`]). A probe touches
//! throwaway keys of the reserved namespace and a throwaway wake-up channel,
//! and deletes its keys again.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, RedisResult, Value};

// The list, each command's constant among it.
pub use super::commands::*;
use super::keys;
use super::request::Request;
use super::script::Script;
use super::{clock, lock, replica};

/// The throwaway names of one probe, and its token.
#[derive(Clone, Debug)]
pub struct Probe {
    /// A lock key in the reserved namespace, hash-tagged by the probe's id.
    pub key: String,
    /// The key's hand-off queue: in the key's hash slot, as every queue is,
    /// so that a Redis Cluster member takes both in one script.
    pub queue: String,
    /// A wake-up channel no client listens on.
    pub channel: String,
    /// The value the probe writes (its id).
    pub token: String,
}

impl Probe {
    /// The names of the probe with `id` (random, so that concurrent checks
    /// of one node never touch each other's keys).
    pub fn new(id: &str) -> Probe {
        let key = format!("{}{{{id}}}", keys::PROBE_PREFIX);
        Probe {
            queue: keys::queue(&key),
            channel: keys::probe_channel(id),
            token: id.to_owned(),
            key,
        }
    }

    /// The lock's `SET key token NX PX ttl`, on the probe's key.
    pub fn set(&self, ttl_ms: u64) -> Cmd {
        lock::set_nx(&self.key, &self.token, ttl_ms)
    }

    /// The `SCRIPT LOAD` of the probe script, as a node connection loads
    /// the lock scripts.
    pub fn load() -> Cmd {
        SCRIPT.load()
    }

    /// The `EVALSHA` of the probe script (loaded with [`Probe::load`]):
    /// tries every command of [`COMMANDS`] tried [`Tried::InScript`] on the
    /// probe's keys, keys made to expire within `ttl_ms` and deleted at the
    /// end. Its reply is read with [`Probe::failures`].
    pub fn run(&self, ttl_ms: u64) -> Cmd {
        let mut cmd = SCRIPT.call(2, (&self.key, &self.queue));
        cmd.arg(&self.token).arg(ttl_ms).arg(&self.channel);
        cmd
    }

    /// The commands that failed in [`Probe::run`], each with its error
    /// as the script saw it, in the order tried.
    pub fn failures(reply: Value) -> RedisResult<Vec<(String, String)>> {
        let flat: Vec<String> = redis::from_redis_value(reply.extract_error()?)?;
        Ok(flat
            .chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect())
    }
}

/// The `WAIT` of replica-acknowledged locks, for no replica and without
/// blocking: allowed or not, it answers at once.
pub fn wait() -> Cmd {
    replica::wait(0, Duration::ZERO)
}

/// The `TIME` with which the library reads a node's clock.
pub fn time() -> Cmd {
    clock::Time.command()
}

/// The reply to [`time`] in microseconds since the epoch.
pub fn parse_time(reply: Value) -> RedisResult<u64> {
    clock::Time.parse(reply)
}

/// The ACL key pattern that a node's user needs besides the lock keys:
/// `~quorumlock:*`.
pub fn key_pattern() -> String {
    format!("~{}*", keys::RESERVED_PREFIX)
}

/// The ACL channel pattern of the hand-off's wake-ups:
/// `&quorumlock:wake:*`.
pub fn channel_pattern() -> String {
    format!("&{}*", keys::WAKE_PREFIX)
}

/// The probe script, loaded like a lock script.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(SOURCE.as_str(), || {
        redis::Script::new(&SOURCE).get_hash().to_owned()
    })
});

static SOURCE: LazyLock<String> = LazyLock::new(source);

/// The probe script: `try` runs a command under `pcall` and records the
/// name and error of each that fails; then each command tried
/// [`Tried::InScript`], in the order of [`COMMANDS`]; then the clean-up:
/// the queue expires (in case the user may not delete it) and both keys go.
/// Returns the failures as a flat list: name, error, name, error, ...
fn source() -> String {
    let mut lua = String::from(
        r"local failed = {}
local function try(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    failed[#failed + 1] = select(1, ...)
    failed[#failed + 1] = reply.err
  end
end
",
    );
    for command in COMMANDS {
        if let Tried::InScript(args) = command.tried {
            lua.push_str(&try_line(command, args));
        }
    }
    lua.push_str(&try_line(&PEXPIRE, "KEYS[2], ARGV[2]"));
    lua.push_str(&try_line(&DEL, "KEYS[1], KEYS[2]"));
    lua.push_str("return failed\n");
    lua
}

/// `try('NAME', args)` as a line of the probe script.
fn try_line(command: &Command, args: &str) -> String {
    let name = command.name;
    if args.is_empty() {
        format!("try('{name}')\n")
    } else {
        format!("try('{name}', {args})\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are the ones `check --help` documents and the hand-off
    /// uses: the key and its queue in one hash slot, the channel under the
    /// wake-up prefix.
    #[test]
    fn a_probes_names_are_reserved_and_share_a_slot() {
        let probe = Probe::new("ab12");
        assert_eq!(probe.key, "quorumlock:check:{ab12}");
        assert_eq!(probe.queue, "quorumlock:waiters:{ab12}:quorumlock:check:{ab12}");
        assert_eq!(probe.channel, "quorumlock:wake:check-ab12");
        assert!(keys::is_reserved(&probe.key) && keys::is_reserved(&probe.queue));
        assert_eq!(key_pattern(), "~quorumlock:*");
        assert_eq!(channel_pattern(), "&quorumlock:wake:*");
    }

    #[test]
    fn the_probe_script_tries_each_command_once_and_cleans_up_last() {
        let lua = &*SOURCE;
        assert!(lua.contains("try('TIME')\n"));
        assert!(lua.contains("try('ZADD', KEYS[2], 'NX', 1, ARGV[1])\n"));
        assert!(
            lua.ends_with("try('PEXPIRE', KEYS[2], ARGV[2])\ntry('DEL', KEYS[1], KEYS[2])\nreturn failed\n")
        );
        for command in COMMANDS {
            let tries = lua.matches(&format!("try('{}'", command.name)).count();
            let expected = match (command.tried, command.name) {
                (Tried::Alone, _) => 0,
                (Tried::InScript(_), "PEXPIRE" | "DEL") => 2,
                (Tried::InScript(_), _) => 1,
            };
            assert_eq!(tries, expected, "{}", command.name);
        }
    }

    #[test]
    fn failures_pair_each_name_with_its_error() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![bulk("ZADD"), bulk("NOPERM no"), bulk("TIME"), bulk("ERR x")]);
        assert_eq!(
            Probe::failures(reply).expect("a list"),
            [
                ("ZADD".to_owned(), "NOPERM no".to_owned()),
                ("TIME".to_owned(), "ERR x".to_owned())
            ]
        );
        assert!(Probe::failures(Value::Int(1)).is_err());
    }
}
