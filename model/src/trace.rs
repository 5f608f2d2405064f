//! A run found by the checker, as readable steps: what happened, and what
//! changed on the nodes and in the clients because of it.

use stateright::{Model, Path};

use crate::model::{Action, Protocol};
use crate::state::{Phase, Reply, Request, State};

/// The steps of `path` up to the first state that breaks `property`, one
/// line each, starting with the nodes' clocks.
pub fn steps(model: &Protocol, path: &Path<State, Action>, property: &str) -> Vec<String> {
    let mut pairs = path.clone().into_vec();
    // The checker may report a path one step past the first state that
    // breaks the property: cut it there.
    let properties = model.properties();
    if let Some(check) = properties.iter().find(|p| p.name == property)
        && let Some(first) = pairs
            .iter()
            .position(|(state, _)| !(check.condition)(model, state))
    {
        pairs.truncate(first + 1);
    }
    let mut lines = Vec::new();
    if let Some((first, _)) = pairs.first() {
        let fast: Vec<String> = (0..first.nodes.len())
            .filter(|&n| first.nodes[n].fast)
            .map(|n| format!("node {n}"))
            .collect();
        if !fast.is_empty() {
            lines.push(format!(
                "{} expire keys {} tick(s) early (fast clock)",
                fast.join(", "),
                model.config.fast
            ));
        }
        if let Some(n) = (0..first.nodes.len()).find(|&n| first.nodes[n].rogue) {
            lines.push(format!(
                "node {n} expires keys {} ticks early (a clock beyond the allowance, {})",
                crate::config::ROGUE,
                if model.config.rogue == crate::RogueClock::Measured {
                    "measured"
                } else {
                    "unmeasured"
                }
            ));
        }
    }
    for window in pairs.windows(2) {
        let ((before, Some(action)), (after, _)) = (&window[0], &window[1]) else {
            continue;
        };
        let mut line = format!("t={}: {}", before.now, describe(model, before, after, *action));
        let effects = effects(before, after, *action);
        if !effects.is_empty() {
            line.push_str(" => ");
            line.push_str(&effects.join("; "));
        }
        lines.push(line);
    }
    lines
}

fn request(request: &Request) -> String {
    match *request {
        Request::Acquire { token, guess: 0 } => format!("acquire (token {token})"),
        Request::Acquire { token, guess } => format!("acquire proposing fence {guess} (token {token})"),
        Request::Release { token } => format!("release (token {token})"),
        Request::Renew { token, round } => format!("renewal (token {token}, round of t={round})"),
        Request::Propose { token, value } => format!("fence proposal {value} (token {token})"),
    }
}

fn reply(reply: &Reply) -> String {
    match *reply {
        Reply::Acquire {
            token,
            granted,
            fence,
            accepted,
        } => {
            let verdict = if granted { "granted" } else { "refused" };
            let took = if accepted { ", proposed fence taken" } else { "" };
            if fence > 0 {
                format!("acquire {verdict} (token {token}, fence floor {fence}{took})")
            } else {
                format!("acquire {verdict} (token {token})")
            }
        }
        Reply::Renew { token, status, .. } => format!("renewal {status:?} (token {token})"),
        Reply::Propose {
            value,
            accepted,
            highest,
            ..
        } => {
            let verdict = if accepted { "accepted" } else { "rejected" };
            format!("proposal {value} {verdict} (fence now {highest})")
        }
    }
}

/// What the action was, in words.
fn describe(model: &Protocol, before: &State, after: &State, action: Action) -> String {
    let nodes = before.nodes.len();
    let link = |c: usize, n: usize| c * nodes + n;
    match action {
        Action::Tick => format!("the clock reaches t={}", after.now),
        Action::Start(c) => format!("client {c} starts an attempt"),
        Action::Renew(c) => format!("client {c}'s watchdog starts a renewal round"),
        Action::Release(c) => format!("client {c} releases"),
        Action::Cancel(c) => format!("client {c}'s caller drops the attempt"),
        Action::Write(c) => format!("client {c} sends its write (then pauses, or the network holds it)"),
        Action::ApplyWrite(c) => {
            let write = before.to_resource[c].expect("a write on its way");
            // `apply_write`'s rule: fenced, a token below the highest seen.
            let refused =
                model.config.fencing != crate::config::Fencing::Off && write.fence < before.resource_seen;
            let verdict = if refused { "refuses" } else { "takes" };
            format!(
                "the resource {verdict} client {c}'s write (fence {}, acquisition #{})",
                write.fence, write.seq
            )
        }
        Action::Deliver(c, n) | Action::DeliverUncounted(c, n) => {
            let sent = before.to_node[link(c, n)][0].request;
            if !before.nodes[n].up {
                return format!("client {c}'s {} finds node {n} down", request(&sent));
            }
            // The node's reply, computed again from the state before.
            let answer = before.nodes[n].clone().run(&model.config, before.now, sent);
            match (answer, action) {
                (Some(answer), Action::Deliver(..)) => {
                    format!(
                        "node {n} runs client {c}'s {}: {}",
                        request(&sent),
                        reply(&answer)
                    )
                }
                (Some(answer), _) => format!(
                    "node {n} runs client {c}'s {}: {}, a reply that comes too late to count",
                    request(&sent),
                    reply(&answer)
                ),
                (None, _) => format!("node {n} runs client {c}'s {}", request(&sent)),
            }
        }
        Action::LoseRequest(c, n) => format!(
            "client {c}'s {} to node {n} is lost",
            request(&before.to_node[link(c, n)][0].request)
        ),
        Action::Crash(n) => format!("node {n} crashes"),
        Action::Restart(n) => format!("node {n} restarts"),
        Action::Pause(n) => format!("node {n} is paused (SIGSTOP)"),
        Action::Resume(n) => format!("node {n} resumes"),
    }
}

/// What changed: keys on nodes, and where each client stands.
fn effects(before: &State, after: &State, action: Action) -> Vec<String> {
    let mut out = Vec::new();
    for (n, (old, new)) in before.nodes.iter().zip(&after.nodes).enumerate() {
        if old.key != new.key {
            out.push(match new.key {
                Some(key) => format!("node {n} holds token {} until t={}", key.token, key.expires),
                None => format!("node {n}'s key is gone"),
            });
        }
    }
    for (c, (old, new)) in before.clients.iter().zip(&after.clients).enumerate() {
        if old.phase == new.phase {
            continue;
        }
        let changed = match (old.phase, new.phase) {
            (
                _,
                Phase::Holding {
                    fence, valid_until, ..
                },
            ) if !matches!(old.phase, Phase::Holding { .. }) => {
                if fence > 0 {
                    format!(
                        "client {c} holds the lock with fencing token {fence}, valid until t={valid_until}"
                    )
                } else {
                    format!("client {c} holds the lock, valid until t={valid_until}")
                }
            }
            (Phase::Holding { valid_until: a, .. }, Phase::Holding { valid_until: b, .. }) if a != b => {
                format!("client {c}'s lock is renewed, valid until t={b}")
            }
            (Phase::Holding { .. }, Phase::Idle) if action == Action::Release(c) => {
                format!("client {c} has released")
            }
            (Phase::Holding { .. }, Phase::Idle) => {
                format!("client {c} is told its lock is lost and releases everywhere")
            }
            (Phase::Acquiring { .. } | Phase::Fencing { .. }, Phase::Idle) => {
                format!("client {c}'s attempt ends without the lock; it sends the release")
            }
            (_, Phase::Fencing { value, .. }) if !matches!(old.phase, Phase::Fencing { value: v, .. } if v == value) =>
            {
                format!("client {c} proposes fencing token {value} to every node")
            }
            _ => continue,
        };
        out.push(changed);
    }
    out
}
