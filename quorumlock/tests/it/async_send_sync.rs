//! Public types and futures can cross threads (multi-threaded runtimes,
//! `tokio::spawn`).

use std::time::Duration;

use quorumlock::{
    BackgroundWork, ConfigError, Error, Guard, Permit, Redlock, RedlockBuilder, ReleaseReport, ReplicaAck,
    Resources, Semaphore, Setting, ShutdownReport,
};

fn send_sync<T: Send + Sync>(_: &T) {}
fn send<T: Send>(_: &T) {}

#[test]
fn public_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Redlock>();
    check::<RedlockBuilder>();
    check::<Guard>();
    check::<Error>();
    check::<ReleaseReport>();
    check::<ReplicaAck>();
    check::<Resources>();
    check::<ConfigError>();
    check::<Setting>();
    check::<ShutdownReport>();
    check::<BackgroundWork>();
    check::<Semaphore>();
    check::<Permit>();
}

#[allow(dead_code, unused_must_use, clippy::let_underscore_future)]
fn futures_are_send(redlock: Redlock, mut guard: Guard, semaphore: Semaphore, permit: Permit) {
    let ttl = Duration::from_secs(1);
    send(&redlock.try_lock("r", ttl));
    send(&redlock.lock(["a", "b"], ttl));
    send(&guard.extend(ttl));
    send(&guard.release());
    send_sync(&redlock);
    send(&semaphore.try_acquire(ttl));
    send(&semaphore.acquire(ttl));
    send(&permit.lost());
    send(&permit.release());
}
