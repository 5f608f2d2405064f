//! [`Redlock::inspect`], `unlock` and `force_unlock` on Redis nodes: each
//! node read (or cleared) in one atomic step, and what a majority says.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;
use tokio::time::Instant;

use super::node::Acked;
use super::quorum::Quorum;
use super::wire::inspect::{Content, Facts, ForceDelete, Inspect};
use super::wire::keys;
use super::wire::lock::Release;
#[cfg(doc)]
use crate::Redlock;
use crate::error::NodeErrorKind;
use crate::lock::inspection::{
    DeletedValue, Inspection, KeyState, NodeInspection, NodeUnlock, UnlockOutcome, UnlockReport, Verdict,
};

/// What each node holds for `resource`: its key and queue, read at once.
pub(crate) async fn inspect(quorum: &Quorum, resource: String) -> Inspection {
    let request = Arc::new(Inspect {
        key: resource.clone(),
        queue: keys::queue(&resource),
    });
    let started = Instant::now();
    let replies = each_node(quorum, |i| {
        let (nodes, request) = (Arc::clone(&quorum.nodes), Arc::clone(&request));
        async move { nodes[i].send(&*request).await }
    })
    .await;
    let elapsed = started.elapsed();
    let nodes: Vec<NodeInspection> = replies
        .into_iter()
        .zip(quorum.nodes.iter())
        .map(|(reply, node)| {
            let (state, waiters) = match reply {
                Ok(facts) => (key_state(&facts), Some(facts.waiters)),
                Err(kind) => (KeyState::Failed(kind), None),
            };
            NodeInspection {
                node: node.name().to_owned(),
                state,
                waiters,
            }
        })
        .collect();
    let verdict = verdict(quorum, &nodes, elapsed);
    Inspection {
        resource,
        nodes,
        quorum: quorum.majority(),
        elapsed,
        verdict,
    }
}

/// Releases `resource` where it holds `token`, owner-checked, on every
/// node; without a token, deletes whatever its key holds.
pub(crate) async fn unlock(quorum: &Quorum, resource: String, token: Option<&str>) -> UnlockReport {
    match token {
        Some(token) => unlock_owned(quorum, resource, token).await,
        None => force_unlock(quorum, resource).await,
    }
}

async fn unlock_owned(quorum: &Quorum, resource: String, token: &str) -> UnlockReport {
    let release = Arc::new(Release::new(Arc::new([resource.clone()]), Arc::from(token)));
    let replies = each_node(quorum, |i| {
        let (nodes, release) = (Arc::clone(&quorum.nodes), Arc::clone(&release));
        async move { Ok(Ok(nodes[i].release(&release).await?)) }
    })
    .await;
    report(quorum, resource, replies, |deleted| {
        (deleted > 0).then(|| DeletedValue::String(token.to_owned()))
    })
}

async fn force_unlock(quorum: &Quorum, resource: String) -> UnlockReport {
    let request = Arc::new(ForceDelete {
        key: resource.clone(),
        queue: keys::queue(&resource),
    });
    let replies = each_node(quorum, |i| {
        let (nodes, request) = (Arc::clone(&quorum.nodes), Arc::clone(&request));
        async move { nodes[i].send(&*request).await }
    })
    .await;
    report(quorum, resource, replies, |content| match content {
        Content::Nothing => None,
        Content::String(value) => Some(DeletedValue::String(lossy(value))),
        Content::Other(kind) => Some(DeletedValue::Other { kind }),
    })
}

/// The report of an unlock from each node's reply, `deleted` saying
/// what a reply deleted.
fn report<T>(
    quorum: &Quorum,
    resource: String,
    replies: Vec<Result<T, NodeErrorKind>>,
    deleted: impl Fn(T) -> Option<DeletedValue>,
) -> UnlockReport {
    let nodes = replies
        .into_iter()
        .zip(quorum.nodes.iter())
        .map(|(reply, node)| NodeUnlock {
            node: node.name().to_owned(),
            outcome: match reply.map(&deleted) {
                Ok(Some(value)) => UnlockOutcome::Deleted(value),
                Ok(None) => UnlockOutcome::NotHeld,
                Err(kind) => UnlockOutcome::Failed(kind),
            },
        })
        .collect();
    UnlockReport {
        resource,
        nodes,
        quorum: quorum.majority(),
    }
}

/// Sends `op(i)` to every node `i` at once and waits for every answer, up
/// to the node timeout: an operator wants every node's word, not the first
/// majority's. Requests still pending at the deadline run on in the
/// background for up to one more node timeout, then are dropped.
async fn each_node<T, F, Fut>(quorum: &Quorum, op: F) -> Vec<Result<T, NodeErrorKind>>
where
    T: Send + 'static,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = RedisResult<Acked<T>>> + Send + 'static,
{
    let mut replies: Vec<Option<Result<T, NodeErrorKind>>> = (0..quorum.len()).map(|_| None).collect();
    let deadline = quorum.deadline();
    let finish_by = deadline + quorum.node_timeout;
    quorum
        .gather(deadline, finish_by, op, |i, reply| {
            replies[i] = Some(reply.and_then(|acked| acked));
            ControlFlow::Continue(())
        })
        .await;
    let budget = quorum.node_timeout;
    replies
        .into_iter()
        .map(|reply| reply.unwrap_or(Err(NodeErrorKind::Timeout(budget))))
        .collect()
}

/// A node's facts as the state of its key.
fn key_state(facts: &Facts) -> KeyState {
    let ttl = u64::try_from(facts.pttl).ok().map(Duration::from_millis);
    match (&facts.content, ttl) {
        (Content::Nothing, _) => KeyState::Free,
        (Content::String(value), Some(ttl)) => KeyState::Held {
            token: lossy(value.clone()),
            ttl,
        },
        (Content::String(value), None) => KeyState::WithoutTtl {
            value: lossy(value.clone()),
        },
        (Content::Other(kind), ttl) => KeyState::WrongType {
            kind: kind.clone(),
            ttl,
        },
    }
}

/// What a majority of all nodes says, from the nodes' states.
///
/// A token is held as long as a majority still holds it: with the ttls of
/// its holders in descending order, until the `quorum`-th of them runs out.
/// That ttl, less the inspection's duration (the ttls were read at some
/// moment within it) and the drift allowance for it, is the validity that
/// is certain.
fn verdict(quorum: &Quorum, nodes: &[NodeInspection], elapsed: Duration) -> Verdict {
    let majority = quorum.majority();
    if nodes.iter().filter(|n| matches!(n.state, KeyState::Free)).count() >= majority {
        return Verdict::Free;
    }
    for candidate in nodes {
        let KeyState::Held { token, .. } = &candidate.state else {
            continue;
        };
        let mut ttls: Vec<Duration> = nodes
            .iter()
            .filter_map(|n| match &n.state {
                KeyState::Held { token: t, ttl } if t == token => Some(*ttl),
                _ => None,
            })
            .collect();
        if ttls.len() >= majority {
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let ttl = ttls[majority - 1];
            let valid_for = ttl.saturating_sub(elapsed).saturating_sub(quorum.drift(ttl));
            return Verdict::Held {
                token: token.clone(),
                valid_for,
            };
        }
    }
    Verdict::Indeterminate
}

/// A value as text; bytes that are not UTF-8 become U+FFFD.
fn lossy(value: Vec<u8>) -> String {
    String::from_utf8(value).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
