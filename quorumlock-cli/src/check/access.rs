//! Permissions: every command the library sends a node, tried as the node
//! URL's user, the way the library sends it.
//!
//! Redis checks a script's commands against the caller's ACL one by one as
//! they run, so the commands the lock scripts run are tried inside one probe
//! script, each under `pcall`: one denial does not hide the next. Plain
//! commands (`SET NX PX`, `SCRIPT LOAD`, `EVALSHA`, `SUBSCRIBE`) are sent as
//! such. Everything touches throwaway keys of the reserved `quorumlock:`
//! namespace, which the probe deletes and which expire by themselves within
//! [`PROBE_TTL_MS`] when the user may not delete them.

use std::time::Duration;

use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use tokio::time::timeout;

use super::command::{no_reply, query};
use super::{Level, Report};

/// The ttl of every probe key: long enough to outlast the probe on a slow
/// link, short enough that a key the user may not delete is gone soon.
const PROBE_TTL_MS: u64 = 10_000;

/// What the library needs a command for, which decides how much its
/// absence matters.
#[derive(Clone, Copy)]
enum Need {
    /// Every lock: without it the node can take no part in locks.
    Lock,
    /// The hand-off to waiters; without it they poll.
    Handoff,
    /// Replica-acknowledged locks (opt-in).
    ReplicaAck,
    /// The operator tools: `status` and `unlock`.
    Operator,
    /// Only this check's own view of the node.
    Check,
}

/// Every command checked: its name as Redis spells it, what it is needed
/// for, and what uses it.
const COMMANDS: &[(&str, Need, &str)] = &[
    (
        "SCRIPT LOAD",
        Need::Lock,
        "every connection loads the lock scripts with it",
    ),
    (
        "EVALSHA",
        Need::Lock,
        "releases, renewals and multi-key acquires call scripts with it",
    ),
    ("SET", Need::Lock, "locks are taken with SET key token NX PX ttl"),
    ("GET", Need::Lock, "releases and renewals check the owner with it"),
    ("DEL", Need::Lock, "releases delete the key with it"),
    (
        "EXISTS",
        Need::Lock,
        "multi-key acquires check their keys with it",
    ),
    ("MGET", Need::Lock, "batched releases read their keys with it"),
    ("PEXPIRE", Need::Lock, "renewals extend the key with it"),
    (
        "PTTL",
        Need::Lock,
        "a waiting lock's attempts keep its queue alive with it",
    ),
    (
        "TIME",
        Need::Lock,
        "renewals and fenced locks read the node's clock (and its rate) with it, and fail without it",
    ),
    ("ZADD", Need::Handoff, "waiters queue with it"),
    ("ZREM", Need::Handoff, "waiters leave their queue with it"),
    ("ZPOPMIN", Need::Handoff, "releases pop the next waiter with it"),
    (
        "ZRANGE",
        Need::Lock,
        "a release whose next waiter left looks further down the queue with it, and fails without it",
    ),
    (
        "ZREMRANGEBYRANK",
        Need::Lock,
        "a release drops waiters that left the queue with it, and fails without it",
    ),
    ("PUBLISH", Need::Handoff, "releases wake the next waiter with it"),
    ("SUBSCRIBE", Need::Handoff, "waiters listen for wake-ups with it"),
    (
        "PING",
        Need::Handoff,
        "idle wake-up connections are checked with it",
    ),
    (
        "WAIT",
        Need::ReplicaAck,
        "replica-acknowledged locks wait for replicas with it",
    ),
    (
        "TYPE",
        Need::Operator,
        "status and unlock tell a lock's token from other data with it",
    ),
    ("ZCARD", Need::Operator, "status counts a lock's waiters with it"),
    (
        "UNLINK",
        Need::Operator,
        "unlock --force deletes whatever holds a key with it",
    ),
    (
        "INFO",
        Need::Check,
        "this check reads version, role and persistence with it",
    ),
    (
        "CONFIG GET",
        Need::Check,
        "this check reads persistence and eviction settings with it",
    ),
];

/// The probe: each command the lock scripts run, on the lock key KEYS[1]
/// and the queue key KEYS[2], under `pcall`; returns the name and error of
/// each one that failed. ARGV: token, ttl in ms, channel.
const PROBE: &str = r"
local failed = {}
local function try(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    failed[#failed + 1] = select(1, ...)
    failed[#failed + 1] = reply.err
  end
end
try('GET', KEYS[1])
try('EXISTS', KEYS[1])
try('MGET', KEYS[1])
try('PEXPIRE', KEYS[1], ARGV[2])
try('PTTL', KEYS[1])
try('DEL', KEYS[1])
try('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
try('DEL', KEYS[1])
try('TYPE', KEYS[1])
try('UNLINK', KEYS[1])
try('TIME')
try('ZADD', KEYS[2], 'NX', 1, ARGV[1])
try('PEXPIRE', KEYS[2], ARGV[2])
try('ZREM', KEYS[2], ARGV[1])
try('ZADD', KEYS[2], 'NX', 1, ARGV[1])
try('ZPOPMIN', KEYS[2])
try('ZCARD', KEYS[2])
try('ZRANGE', KEYS[2], 0, 0)
try('ZREMRANGEBYRANK', KEYS[2], 0, 0)
try('DEL', KEYS[2])
try('PUBLISH', ARGV[3], ARGV[1])
return failed
";

/// Whether a command failed for want of a permission (a command, a key or
/// a channel), not for another reason.
pub(super) fn is_denied(error: &redis::RedisError) -> bool {
    error.code() == Some("NOPERM") || denied_text(&error.to_string())
}

/// The same for an error reply as text, which is all a script gets:
/// inside scripts Redis words most denials differently, with code ERR.
fn denied_text(text: &str) -> bool {
    text.contains("NOPERM") || text.contains("The user executing the script can't")
}

/// Records that the node's user may not run `command` (once per command),
/// or may not use the probe's keys.
pub(super) fn deny(report: &mut Report, command: &'static str, detail: &str) {
    let detail = detail.trim();
    if detail.contains("keys") {
        deny_keys(report, detail);
        return;
    }
    if report.missing.contains(&command) {
        return;
    }
    let Some(&(_, need, why)) = COMMANDS.iter().find(|(name, _, _)| *name == command) else {
        return;
    };
    report.missing.push(command);
    let (level, consequence) = match need {
        Need::Lock => (Level::Error, "this node can take no part in locks"),
        Need::Handoff => (
            Level::Warning,
            "waiters fall back to polling (a slower hand-off, more commands)",
        ),
        Need::ReplicaAck => (
            Level::Warning,
            "replica-acknowledged locks (ReplicaAck) cannot be used",
        ),
        Need::Operator => (
            Level::Warning,
            "quorumlock status and unlock (Redlock::inspect, unlock, force_unlock) fail on this node",
        ),
        Need::Check => (Level::Warning, "this check sees less; check the rest yourself"),
    };
    let grant = if detail.contains("channel") {
        "allow &quorumlock:wake:*".to_owned()
    } else {
        format!("grant +{}", command.to_lowercase().replace(' ', "|"))
    };
    report.add(
        level,
        "missing_permission",
        format!("no permission for {command} ({detail}): {why}; without it {consequence}; {grant}"),
    );
}

/// The user may not use keys in `quorumlock:*`. A warning: the lock keys
/// are the caller's resource names, which the probe cannot know, while the
/// hand-off's queues do live there.
fn deny_keys(report: &mut Report, detail: &str) {
    if report.findings.iter().any(|f| f.code == "key_permission") {
        return;
    }
    report.warn(
        "key_permission",
        format!(
            "the user may not use the probe's keys in quorumlock:* ({detail}): the hand-off's queues live \
             there, so waiters fall back to polling, and the lock commands could not be tried; allow \
             ~quorumlock:* and the lock keys"
        ),
    );
}

/// Tries every command on throwaway keys and a throwaway channel. Fails
/// only on errors that are not permissions (the node is then unusable).
pub(super) async fn probe(
    conn: &mut MultiplexedConnection,
    client: &redis::Client,
    limit: Duration,
    report: &mut Report,
) -> redis::RedisResult<()> {
    let id = format!("{:032x}", rand::random::<u128>());
    // One hash tag: both keys in one slot, for a Redis Cluster member.
    let (key, queue) = (
        format!("quorumlock:check:{{{id}}}"),
        format!("quorumlock:waiters:{{{id}}}:quorumlock:check:{{{id}}}"),
    );
    let channel = format!("quorumlock:wake:check-{id}");
    let token = id.clone();

    let mut set = redis::cmd("SET");
    set.arg(&key).arg(&token).arg("NX").arg("PX").arg(PROBE_TTL_MS);
    allowed(report, "SET", query::<Option<String>>(conn, limit, set).await)?;

    let mut subscriber = subscribe(client, &channel, limit, report).await?;

    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(PROBE);
    let sha = allowed(report, "SCRIPT LOAD", query::<String>(conn, limit, load).await)?;
    let (mut ran, mut published) = (false, false);
    if let Some(sha) = sha {
        let mut call = redis::cmd("EVALSHA");
        call.arg(sha)
            .arg(2)
            .arg(&key)
            .arg(&queue)
            .arg(&token)
            .arg(PROBE_TTL_MS)
            .arg(&channel);
        if let Some(failed) = allowed(report, "EVALSHA", query::<Vec<String>>(conn, limit, call).await)? {
            (ran, published) = (true, true);
            for pair in failed.chunks(2) {
                let [command, error] = pair else { continue };
                if command == "PUBLISH" {
                    published = false;
                }
                match COMMANDS.iter().find(|(name, _, _)| name == command) {
                    Some(&(name, _, _)) if denied_text(error) => deny(report, name, error),
                    _ => report.error(
                        "command_failed",
                        format!("{command} failed inside a script: {error}"),
                    ),
                }
            }
        }
    }
    if !ran {
        // The probe script did not delete the key: do it here (it expires anyway).
        let mut del = redis::cmd("DEL");
        del.arg(&key);
        let _ = query::<i64>(conn, limit, del).await;
    }
    if let Some(subscriber) = subscriber.as_mut()
        && published
    {
        let heard = timeout(limit, subscriber.on_message().next()).await;
        let heard = heard.ok().flatten().and_then(|m| m.get_payload::<String>().ok());
        if heard.as_deref() != Some(token.as_str()) {
            report.warn(
                "pubsub_silent",
                format!(
                    "a message published on {channel} did not arrive on a subscribed connection within {limit:?}: \
                     waiters may not be woken by releases (they fall back to polling)"
                ),
            );
        }
    }

    let mut wait = redis::cmd("WAIT");
    wait.arg(0).arg(0);
    allowed(report, "WAIT", query::<i64>(conn, limit, wait).await)?;
    Ok(())
}

/// A subscriber to `channel` on a connection of its own, or `None` when the
/// user may not subscribe (reported).
async fn subscribe(
    client: &redis::Client,
    channel: &str,
    limit: Duration,
    report: &mut Report,
) -> redis::RedisResult<Option<redis::aio::PubSub>> {
    let subscribed = timeout(limit, async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub)
    })
    .await
    .unwrap_or_else(|_| Err(no_reply(limit)));
    allowed(report, "SUBSCRIBE", subscribed)
}

/// The reply, `None` when the command was denied (reported), or the error
/// when it failed otherwise.
fn allowed<T>(
    report: &mut Report,
    command: &'static str,
    result: redis::RedisResult<T>,
) -> redis::RedisResult<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if is_denied(&e) => {
            deny(report, command, &e.to_string());
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
