//! `quorumlock status KEY...`: is each lock held, by whom, for how long,
//! with how many waiters? One table per key (or one JSON object for
//! scripts), from [`quorumlock::Redlock::inspect`].

use std::process::ExitCode;

use quorumlock::{Error, Inspection, KeyState, NodeError, Verdict};
use serde_json::{Value, json};

use crate::duration::show;
use crate::exit::{self, Exit};
use crate::{Nodes, fail};

const STATUS_HELP: &str = "\
Examples:
  quorumlock status archive:nightly
  quorumlock status --nodes-file /etc/quorumlock/nodes archive:nightly report:weekly --json

For each key and node: its state (absent, held, held_without_ttl: not a lock
and it blocks every lock on the name there, wrong_type: other data uses the
name, failed: the node's error), the value (the holder's token; quorumlock
tokens are 32 hex digits, any other string is another library's), the ttl
left and the hand-off queue's size (an upper bound on the waiters). Then the
verdict: held (a majority of all nodes hold one token; for at least the time
shown, unless released), free (a majority have no key) or indeterminate
(nodes down or disagreeing). A snapshot: the lock may change hands at once.

--json prints one object instead of the tables:
  exit_code     the exit status (below)
  keys          one object per key, in the order given:
    key, verdict (\"held\", \"free\", \"indeterminate\"), token and
    valid_for_ms (null unless held), quorum, elapsed_ms,
    nodes: [{index (from 1), node (host:port/db, never a password), state,
      value, type, ttl_ms, waiters, error (null unless failed)}]";

/// `status --help`'s closing text: examples, the states, JSON, exit statuses.
fn status_help() -> String {
    format!("{STATUS_HELP}\n\n{}", exit::table(Some("status")))
}

/// Options of `quorumlock status`.
#[derive(clap::Args, Debug)]
#[command(after_help = status_help())]
pub(crate) struct Args {
    #[command(flatten)]
    nodes: Nodes,
    /// The lock keys (resource names) to look at.
    #[arg(required = true, value_name = "KEY")]
    keys: Vec<String>,
    /// Print one JSON object (fields in the help's JSON section) instead of the tables.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(args: Args) -> ExitCode {
    let redlock = match args.nodes.client() {
        Ok(redlock) => redlock,
        Err(message) => return fail(Exit::Usage, message),
    };
    let mut inspections = Vec::with_capacity(args.keys.len());
    for key in &args.keys {
        match redlock.inspect(key).await {
            Ok(inspection) => inspections.push(inspection),
            Err(Error::Config(error)) => return fail(Exit::Usage, error.to_string()),
            Err(error) => return fail(Exit::Internal, error),
        }
    }
    // The worst verdict of all keys: indeterminate, then held, then free
    // (their statuses grow in that order).
    let status = inspections
        .iter()
        .map(|i| match i.verdict {
            Verdict::Free => Exit::Success,
            Verdict::Held { .. } => Exit::Held,
            _ => Exit::Indeterminate,
        })
        .max_by_key(|status| status.code())
        .unwrap_or(Exit::Success);
    if args.json {
        println!("{}", json(&inspections, status.code()));
    } else {
        for inspection in &inspections {
            print!("{}", human(inspection));
        }
    }
    status.into()
}

/// A key state's stable name (as `check --key` names them), its value and its ttl.
fn describe(state: &KeyState) -> (&'static str, Option<&str>, Option<std::time::Duration>) {
    match state {
        KeyState::Free => ("absent", None, None),
        KeyState::Held { token, ttl } => ("held", Some(token), Some(*ttl)),
        KeyState::WithoutTtl { value } => ("held_without_ttl", Some(value), None),
        KeyState::WrongType { ttl, .. } => ("wrong_type", None, *ttl),
        _ => ("failed", None, None),
    }
}

fn kind(state: &KeyState) -> Option<&str> {
    match state {
        KeyState::Held { .. } | KeyState::WithoutTtl { .. } => Some("string"),
        KeyState::WrongType { kind, .. } => Some(kind),
        _ => None,
    }
}

/// The node's error as text, without its name (the table shows that).
fn error(node: &str, state: &KeyState) -> Option<String> {
    match state {
        KeyState::Failed(kind) => {
            let full = NodeError {
                node: node.to_owned(),
                kind: kind.clone(),
            }
            .to_string();
            Some(
                full.strip_prefix(&format!("{node}: "))
                    .unwrap_or(&full)
                    .to_owned(),
            )
        }
        _ => None,
    }
}

fn verdict_name(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Free => "free",
        Verdict::Held { .. } => "held",
        _ => "indeterminate",
    }
}

/// One key: a line with the verdict, then a row per node.
fn human(inspection: &Inspection) -> String {
    let header = ["#", "node", "state", "token", "ttl", "waiters"];
    let rows: Vec<Vec<String>> = inspection
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (state, value, ttl) = describe(&n.state);
            let state = match (&n.state, error(&n.node, &n.state)) {
                (KeyState::WrongType { kind, .. }, _) => format!("{state} ({kind})"),
                (_, Some(error)) => format!("{state}: {error}"),
                _ => state.to_owned(),
            };
            vec![
                (i + 1).to_string(),
                n.node.clone(),
                state,
                value.map_or("-".into(), |v| format!("{v:?}")),
                ttl.map_or("-".into(), show),
                n.waiters.map_or("-".into(), |w| w.to_string()),
            ]
        })
        .collect();
    let mut out = headline(inspection);
    out.push_str(&crate::table::aligned(&header, &rows, "  "));
    out
}

/// The verdict on one key, as a line.
pub(crate) fn headline(inspection: &Inspection) -> String {
    let counts = format!("majority {} of {}", inspection.quorum, inspection.nodes.len());
    match &inspection.verdict {
        Verdict::Held { token, valid_for, .. } => format!(
            "key {:?}: held by {token:?} for at least {} ({counts})\n",
            inspection.resource,
            show(*valid_for)
        ),
        Verdict::Free => format!("key {:?}: free ({counts})\n", inspection.resource),
        _ => format!(
            "key {:?}: indeterminate: nodes down or disagreeing ({counts})\n",
            inspection.resource
        ),
    }
}

/// Every key as one JSON object.
pub(crate) fn json(inspections: &[Inspection], code: u8) -> Value {
    let keys: Vec<Value> = inspections
        .iter()
        .map(|inspection| {
            let (token, valid_for) = match &inspection.verdict {
                Verdict::Held { token, valid_for, .. } => (Some(token), Some(valid_for.as_millis())),
                _ => (None, None),
            };
            let nodes: Vec<Value> = inspection
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let (state, value, ttl) = describe(&n.state);
                    json!({
                        "index": i + 1,
                        "node": n.node,
                        "state": state,
                        "value": value,
                        "type": kind(&n.state),
                        "ttl_ms": ttl.map(|t| t.as_millis()),
                        "waiters": n.waiters,
                        "error": error(&n.node, &n.state),
                    })
                })
                .collect();
            json!({
                "key": inspection.resource,
                "verdict": verdict_name(&inspection.verdict),
                "token": token,
                "valid_for_ms": valid_for,
                "quorum": inspection.quorum,
                "elapsed_ms": inspection.elapsed.as_secs_f64() * 1000.0,
                "nodes": nodes,
            })
        })
        .collect();
    json!({ "exit_code": code, "keys": keys })
}
