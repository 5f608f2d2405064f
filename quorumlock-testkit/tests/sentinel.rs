//! The Sentinel harness against real processes: sentinels learn the master,
//! its replicas and each other; when the master is killed they promote a
//! replica and all report it, and the old master rejoins as a replica.

use quorumlock_testkit::get;
use quorumlock_testkit::sentinel::SentinelSetup;

#[test]
fn sentinels_know_the_master_and_its_replicas() {
    let setup = SentinelSetup::start(2, 3);
    assert_eq!(setup.master_name(), "quorumlock");
    let sentinels: Vec<String> = setup
        .sentinel_ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    assert_eq!(
        setup.url(),
        format!("redis+sentinel://{}/quorumlock", sentinels.join(","))
    );
    assert_eq!(setup.master_port(), setup.data_ports()[0]);
    assert_eq!(setup.master_index(), 0);
    for j in 0..3 {
        let info = setup.sentinel_master_info(j);
        assert_eq!(info["num-slaves"], "2", "sentinel {j}: {info:?}");
        assert_eq!(info["num-other-sentinels"], "2", "sentinel {j}: {info:?}");
        assert_eq!(info["quorum"], "2", "sentinel {j}: {info:?}");
    }
}

#[test]
fn failover_moves_the_master_and_sentinels_report_it() {
    let mut setup = SentinelSetup::start(2, 3);
    let master = setup.data_node(0);
    let reply = master.pipeline(&[&["SET", "lock:sentinel", "held"], &["WAIT", "2", "5000"]]);
    assert_eq!(
        reply.expect("SET and WAIT")[1],
        ":2\r\n",
        "both replicas have the key"
    );

    let old = setup.master_port();
    let new = setup.kill_master_and_wait_for_failover();
    assert_ne!(new, old);
    assert!(!setup.is_running(0));
    assert_eq!(setup.master_port(), new);
    let promoted = setup.master_index();
    assert_ne!(promoted, 0);
    assert_eq!(
        get(setup.data_node(promoted), "lock:sentinel").as_deref(),
        Some("held")
    );
    let reply = setup
        .data_node(promoted)
        .command(&["SET", "lock:sentinel", "again"]);
    assert!(reply.expect("SET").starts_with("+OK"));
    assert!((0..3).any(|j| setup.sentinel_log(j).contains("+switch-master")));

    // The old master comes back and the sentinels make it a replica.
    setup.restart(0);
    setup.wait_for_sentinels();
    assert_eq!(setup.master_port(), new);
    let info = setup
        .data_node(0)
        .command(&["INFO", "replication"])
        .expect("INFO");
    assert!(info.contains("role:slave"), "{info}");
}
