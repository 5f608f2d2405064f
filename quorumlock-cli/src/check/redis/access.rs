//! Permissions: every command the library sends a node, tried as the node
//! URL's user, the way the library sends it.
//!
//! The commands, what each is needed for and how to try each come from the
//! library's probe module ([`cli_probe`]): the commands the lock scripts run
//! are tried inside one probe script, each under `pcall`, so that one
//! denial does not hide the next; the others are sent alone. Everything
//! touches throwaway keys of the reserved namespace, which the probe
//! deletes and which expire by themselves within [`PROBE_TTL_MS`] when the
//! user may not delete them.

use std::time::Duration;

use futures::StreamExt;
use quorumlock::probe::{
    self as cli_probe, CLUSTER_SLOTS, Command, EVALSHA, Need, Probe, SCRIPT_LOAD, SET, SUBSCRIBE,
    UNSUBSCRIBE, WAIT,
};
use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::time::timeout;

use super::command::{no_reply, query};
use super::shard::{self, Shard};
use crate::check::{Level, Report};

/// The ttl of every probe key: long enough to outlast the probe on a slow
/// link, short enough that a key the user may not delete is gone soon.
const PROBE_TTL_MS: u64 = 10_000;

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
pub(super) fn deny(report: &mut Report, command: &'static Command, detail: &str) {
    let detail = detail.trim();
    if detail.contains("keys") {
        deny_keys(report, detail);
        return;
    }
    if report.missing.contains(&command.name) {
        return;
    }
    report.missing.push(command.name);
    let (level, consequence) = match command.need {
        Need::Lock => (Level::Error, "this node can take no part in locks"),
        Need::Handoff => (
            Level::Warning,
            "waiters fall back to polling (a slower hand-off, more commands)",
        ),
        Need::ReplicaAck => (
            Level::Warning,
            "replica-acknowledged locks (ReplicaAck) cannot be used",
        ),
        Need::Cluster => (
            Level::Warning,
            "this node cannot serve as a seed of a Redis Cluster member",
        ),
        Need::Operator => (
            Level::Warning,
            "quorumlock status and unlock (Redlock::inspect, unlock, force_unlock) fail on this node",
        ),
        Need::Check => (Level::Warning, "this check sees less; check the rest yourself"),
    };
    let grant = if detail.contains("channel") {
        format!("allow {}", cli_probe::channel_pattern())
    } else {
        format!("grant {}", command.acl_rule())
    };
    let (name, why) = (command.name, command.why);
    report.add(
        level,
        "missing_permission",
        format!("no permission for {name} ({detail}): {why}; without it {consequence}; {grant}"),
    );
}

/// The user may not use keys in the reserved namespace. A warning: the lock
/// keys are the caller's resource names, which the probe cannot know, while
/// the hand-off's queues do live there.
fn deny_keys(report: &mut Report, detail: &str) {
    if report.findings.iter().any(|f| f.code == "key_permission") {
        return;
    }
    let (prefix, pattern) = (quorumlock::RESERVED_PREFIX, cli_probe::key_pattern());
    report.warn(
        "key_permission",
        format!(
            "the user may not use the probe's keys in {prefix}* ({detail}): the hand-off's queues live \
             there, so waiters fall back to polling, and the lock commands could not be tried; allow \
             {pattern} and the lock keys"
        ),
    );
}

/// Tries every command on throwaway keys and a throwaway channel: on a
/// primary of a cluster (`shard`) keys of a slot it serves, and CLUSTER
/// SLOTS too, which a server outside a cluster refuses whatever its user
/// may do. Fails only on errors that are not permissions (the node is then
/// unusable).
pub(super) async fn probe(
    conn: &mut MultiplexedConnection,
    client: &redis::Client,
    (limit, shard): (Duration, Option<&Shard<'_>>),
    report: &mut Report,
) -> redis::RedisResult<()> {
    let probe = new_probe(shard);
    let set = query::<Option<String>>(conn, limit, probe.set(PROBE_TTL_MS)).await;
    allowed(report, &SET, set)?;

    let mut subscriber = subscribe(client, &probe.channel, limit, report).await?;
    let ran = run_script(conn, &probe, limit, report).await?;
    if ran.is_none() {
        // The probe script did not delete the key: do it here (it expires anyway).
        let mut del = cli_probe::DEL.cmd();
        del.arg(&probe.key);
        let _ = query::<i64>(conn, limit, del).await;
    }
    if let Some(subscriber) = subscriber.as_mut() {
        if ran == Some(Published::Yes) {
            listen(subscriber, &probe, limit, report).await;
        }
        let left = timeout(limit, subscriber.unsubscribe(&probe.channel)).await;
        allowed(
            report,
            &UNSUBSCRIBE,
            left.unwrap_or_else(|_| Err(no_reply(limit))),
        )?;
    }

    let wait = query::<i64>(conn, limit, cli_probe::wait()).await;
    allowed(report, &WAIT, wait)?;
    if shard.is_some() {
        let slots = query::<Value>(conn, limit, CLUSTER_SLOTS.cmd()).await;
        allowed(report, &CLUSTER_SLOTS, slots)?;
    }
    Ok(())
}

/// Random ids tried for a probe whose keys a primary serves: a primary
/// with a single slot of the 16384 is hit within this many with a
/// probability of 1 - 1e-4.
const PROBE_IDS: usize = 150_000;

/// A probe with a random id, its keys in a slot that `shard` serves (when
/// one is found, else in any slot: the probe's writes then fail).
fn new_probe(shard: Option<&Shard<'_>>) -> Probe {
    let random = || Probe::new(&format!("{:032x}", rand::random::<u128>()));
    (0..PROBE_IDS)
        .map(|_| random())
        .find(|probe| shard::holds(shard, &probe.key))
        .unwrap_or_else(random)
}

/// Whether the probe script could publish on the probe's channel.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Published {
    Yes,
    No,
}

/// Loads and runs the probe script and reports each command that failed
/// in it; `None` when it could not run (reported).
async fn run_script(
    conn: &mut MultiplexedConnection,
    probe: &Probe,
    limit: Duration,
    report: &mut Report,
) -> redis::RedisResult<Option<Published>> {
    let loaded = query::<String>(conn, limit, Probe::load()).await;
    if allowed(report, &SCRIPT_LOAD, loaded)?.is_none() {
        return Ok(None);
    }
    let ran = query::<Value>(conn, limit, probe.run(PROBE_TTL_MS)).await;
    let Some(reply) = allowed(report, &EVALSHA, ran.and_then(Probe::failures))? else {
        return Ok(None);
    };
    let mut published = Published::Yes;
    for (name, error) in reply {
        let command = Command::named(&name);
        if command.is_some_and(|c| c.name == cli_probe::PUBLISH.name) {
            published = Published::No;
        }
        match command {
            Some(command) if denied_text(&error) => deny(report, command, &error),
            _ => report.error(
                "command_failed",
                format!("{name} failed inside a script: {error}"),
            ),
        }
    }
    Ok(Some(published))
}

/// Warns when the message the probe script published does not reach the
/// subscriber.
async fn listen(subscriber: &mut redis::aio::PubSub, probe: &Probe, limit: Duration, report: &mut Report) {
    let heard = timeout(limit, subscriber.on_message().next()).await;
    let heard = heard.ok().flatten().and_then(|m| m.get_payload::<String>().ok());
    if heard.as_deref() != Some(probe.token.as_str()) {
        let channel = &probe.channel;
        report.warn(
            "pubsub_silent",
            format!(
                "a message published on {channel} did not arrive on a subscribed connection within {limit:?}: \
                 waiters may not be woken by releases (they fall back to polling)"
            ),
        );
    }
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
    allowed(report, &SUBSCRIBE, subscribed)
}

/// The reply, `None` when the command was denied (reported), or the error
/// when it failed otherwise.
fn allowed<T>(
    report: &mut Report,
    command: &'static Command,
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
