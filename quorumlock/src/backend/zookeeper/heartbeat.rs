//! The ZooKeeper round of the renewal loop ([`crate::lock::renewal`]): one
//! session keeps every lock of the client, so one round serves every lock
//! due. A round sends a `sync` (which goes through the leader, so a server
//! cut off from it cannot answer) and, behind it on the same connection, a
//! read of every due lock's nodes. A lock counts as renewed from the instant
//! the round was sent, for the share of the session timeout a heartbeat
//! vouches for ([`ZK_TRUSTED_SHARE`](crate::config::zookeeper::ZK_TRUSTED_SHARE))
//! and never more than its ttl.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::nodes::Nodes;
use super::{Ensemble, ZkResult};
use crate::backend::cluster::Store as _;
use crate::config::zookeeper::ZK_RETRY;
use crate::lock::renewal::{Outcome, Renewed, Round};
use crate::lock::state::Held;
use crate::tasks::Tasks;

/// The ensemble a round goes to.
#[derive(Debug)]
pub(crate) struct ZooKeeperRound(pub(crate) Arc<Ensemble>);

impl Round for ZooKeeperRound {
    type Kept = Arc<Nodes>;

    fn tasks(&self) -> &Arc<Tasks> {
        &self.0.state.tasks
    }

    fn retry_delay(&self) -> Duration {
        ZK_RETRY
    }

    fn renew(&self, due: &[Renewed<Arc<Nodes>>]) -> impl Future<Output = Vec<Outcome>> + Send {
        heartbeat(&self.0, due)
    }

    fn give_back(&self, held: &Arc<Held>, nodes: &Arc<Nodes>) {
        self.0.give_back_in_background(held, nodes);
    }
}

/// One round for the `due` locks: a `sync`, then a read of each lock's
/// nodes, all sent at once.
async fn heartbeat(store: &Ensemble, due: &[Renewed<Arc<Nodes>>]) -> Vec<Outcome> {
    let sent = Instant::now();
    let client = match store.client().await {
        Ok(client) => client,
        Err(error) => {
            let failed = |_| Outcome::Failed {
                confirmed: 0,
                error: error.to_string(),
            };
            return due.iter().map(failed).collect();
        }
    };
    let deadline = sent + store.state.request_timeout;
    let reads = join_all(
        due.iter()
            .map(|renewed| renewed.kept.all_present(store, &client, deadline)),
    );
    let (synced, reads) = tokio::join!(store.call_by(deadline, client.sync("/")), reads);
    due.iter()
        .zip(reads)
        .map(|(renewed, read)| match outcome(&synced, read) {
            Found::Present => Outcome::Confirmed {
                lease: store.lease(&client, sent, renewed.held.ttl()),
                confirmed: 1,
            },
            Found::Gone(why) => Outcome::Gone(why),
            Found::Failed(error) => Outcome::Failed { confirmed: 0, error },
        })
        .collect()
}

/// What one round found for one lock.
enum Found {
    /// Every node is there, through a session confirmed by the leader.
    Present,
    /// A node of the lock is gone, or the session that held it.
    Gone(&'static str),
    /// No answer: try again soon, while the validity lasts.
    Failed(String),
}

/// One lock's outcome from the round's `sync` and the read of its nodes.
fn outcome(synced: &ZkResult<()>, read: ZkResult<bool>) -> Found {
    use zookeeper_client::Error::SessionExpired;
    match (synced, read) {
        (Err(SessionExpired), _) | (_, Err(SessionExpired)) => Found::Gone("the session expired"),
        (Ok(()), Ok(true)) => Found::Present,
        (Ok(()), Ok(false)) => Found::Gone("a node of the lock is gone"),
        (Err(error), _) => Found::Failed(error.to_string()),
        (_, Err(error)) => Found::Failed(error.to_string()),
    }
}
