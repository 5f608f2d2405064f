//! Bad network input: a node that answers replies of the wrong type,
//! garbage, or closes connections mid-reply is a failed node, nothing else:
//! locks are granted over the healthy majority, refused as unreachable
//! without one, no key is leaked and nothing panics.

use std::time::Duration;

use quorumlock::{Error, NodeErrorKind, Redlock};
use quorumlock_testkit::checker::{Checker, ci_or_soak};
use quorumlock_testkit::fake::{FakeNode, Misbehaviour};
use quorumlock_testkit::faults::{Cluster, Schedule};
use quorumlock_testkit::{PanicProbe, RedisServer, dbsize, eventually, get, start_nodes, urls};
use rand::RngExt;
use tokio::time::Instant;

use super::ms;

/// How long the contended run over a misbehaving node lasts in CI.
const CI_BROKEN_NODE_FOR: Duration = Duration::from_secs(2);

/// How long the contended run over a misbehaving node lasts in the soak: the
/// fault is in force throughout, and the short soak holds grant the lock
/// some 65 times a second, about 4,000 grants per kind of misbehaviour.
const SOAK_BROKEN_NODE_FOR: Duration = Duration::from_secs(60);

/// Resource of the uncontended rounds.
const UNCONTENDED_RESOURCE: &str = "bad-input";

/// A node's timeout in the uncontended rounds.
const NODE_TIMEOUT: Duration = Duration::from_millis(150);

/// The ttl of the uncontended rounds: far longer than a round, so a key
/// gone after one was released, not expired.
const TTL: Duration = Duration::from_secs(10);

/// 2 real nodes + 1 fake: locks are granted and released; 1 real + 2
/// fakes: every attempt fails as `Unreachable` with the fakes as failed
/// nodes; a contended run over 2 real + 1 fake stays safe; no panic and no
/// key left on the real nodes.
async fn broken_node_is_a_failed_node(misbehaviour: Misbehaviour, scenario: &str) {
    let mut checker = Checker::new(scenario);
    let seed = checker.rng().random::<u64>();
    let probe = PanicProbe::start();
    let real = start_nodes(2);
    let fakes = [
        FakeNode::start(misbehaviour, seed),
        FakeNode::start(misbehaviour, seed + 1),
    ];
    granted_by_two_real_nodes(&real, &fakes[0]).await;
    unreachable_with_one_real_node(&real[0], &fakes).await;
    assert!(
        fakes.iter().all(|f| f.misbehaved() > 0),
        "the fakes were exercised"
    );
    assert!(probe.panics().is_empty(), "panics: {:?}", probe.panics());

    // Contenders over 2 real nodes and the misbehaving one.
    let [fake, _] = fakes;
    let cluster = Cluster::from_servers(real).with_fake(fake);
    let schedule = Schedule::new().wait(ci_or_soak(CI_BROKEN_NODE_FOR, SOAK_BROKEN_NODE_FOR));
    let (report, cluster) = checker.tail(ms(0)).run(cluster, schedule).await;
    report.assert_safe();
    assert!(report.acquisitions > 0);
    let deadline = Instant::now() + ms(500);
    while cluster.dbsizes().iter().any(|n| *n != Some(0)) {
        assert!(Instant::now() < deadline, "keys left: {:?}", cluster.dbsizes());
        tokio::time::sleep(ms(5)).await;
    }
}

/// Over the `real` nodes and the `fake`, 20 rounds: each lock is granted
/// (on both real nodes) and released everywhere real.
async fn granted_by_two_real_nodes(real: &[RedisServer], fake: &FakeNode) {
    let mut urls = urls(real);
    urls.push(fake.url());
    let two_real = Redlock::builder()
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    for round in 0..20 {
        let guard = two_real
            .try_lock(UNCONTENDED_RESOURCE, TTL)
            .await
            .unwrap_or_else(|e| panic!("round {round}: 2 of 3 nodes are healthy: {e}"))
            .expect("free resource");
        for server in real {
            assert_eq!(get(server, UNCONTENDED_RESOURCE).as_deref(), Some(guard.token()));
        }
        let released = guard.release().await.expect("2 real nodes confirm the release");
        assert!(released.confirmed >= 2, "round {round}: {released:?}");
        // Released on the real nodes (the release returns at a majority of
        // answers, which may include the fake's; the rest follows).
        eventually(
            &format!("round {round}: released on the real nodes"),
            Duration::from_secs(5),
            || real.iter().all(|s| dbsize(s) == 0),
        )
        .await;
    }
}

/// Over the `real` node and both `fakes`, 20 rounds: each attempt fails as
/// `Unreachable`, the fakes its only failed nodes, and leaves no key on the
/// real node.
async fn unreachable_with_one_real_node(real: &RedisServer, fakes: &[FakeNode]) {
    let one_real = Redlock::builder()
        .nodes([real.url(), fakes[0].url(), fakes[1].url()])
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    for round in 0..20 {
        match one_real.try_lock(UNCONTENDED_RESOURCE, TTL).await {
            Err(Error::Unreachable {
                succeeded,
                refused: 0,
                errors,
                ..
            }) => {
                assert!(succeeded <= 1);
                assert_eq!(errors.len(), 2, "round {round}: {errors:?}");
                for error in &errors {
                    assert!(
                        fakes
                            .iter()
                            .any(|f| error.node.starts_with(&format!("127.0.0.1:{}/", f.port()))),
                        "round {round}: only the fakes fail: {error}"
                    );
                    assert!(matches!(
                        error.kind,
                        NodeErrorKind::Redis(_) | NodeErrorKind::Timeout(_)
                    ));
                }
            }
            other => panic!("round {round}: expected Unreachable, got {other:?}"),
        }
        // The failed attempt released the real node before returning, or at
        // least sent the release (it runs behind the SET on the same
        // connection): the key is gone long before its 10 s ttl.
        let deadline = Instant::now() + ms(500);
        while dbsize(real) != 0 {
            assert!(
                Instant::now() < deadline,
                "round {round}: a failed attempt leaked its key"
            );
            tokio::time::sleep(ms(5)).await;
        }
    }
}

#[tokio::test]
async fn node_answering_wrong_reply_types_is_a_failed_node_and_leaks_nothing() {
    broken_node_is_a_failed_node(
        Misbehaviour::WrongType,
        "one node answers replies of the wrong type",
    )
    .await;
}

#[tokio::test]
async fn node_answering_garbage_is_a_failed_node_and_leaks_nothing() {
    broken_node_is_a_failed_node(Misbehaviour::Garbage, "one node answers garbage").await;
}

#[tokio::test]
async fn node_closing_mid_reply_is_a_failed_node_and_leaks_nothing() {
    broken_node_is_a_failed_node(
        Misbehaviour::CloseMidReply,
        "one node closes connections mid-reply",
    )
    .await;
}
