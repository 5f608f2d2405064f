//! Lock tokens stay unique across `fork`: a prefork server forks its
//! workers after the client has drawn tokens, and a thread-local generator
//! copied into every child would make the children draw the same tokens,
//! each able to release the other's lock.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

use quorumlock_testkit::{RedisServer, client};

/// Takes (and keeps) a lock on `key` and returns its token.
fn token_of_a_lock(node: &RedisServer, key: &str) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let redlock = client(std::slice::from_ref(node));
        let guard = redlock
            .try_lock(key, Duration::from_secs(30))
            .await
            .expect("node up")
            .expect("free");
        let token = guard.token().to_owned();
        std::mem::forget(guard);
        token
    })
}

#[test]
fn a_forked_child_draws_other_tokens_than_its_parent() {
    let node = RedisServer::start();
    // The parent draws first, so that a thread-local generator is seeded
    // and its state is what the child would inherit.
    let _ = token_of_a_lock(&node, "fork:warm");
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the descriptors were just created and are owned here only.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the child runs only this thread's code: it takes a lock on a
    // runtime of its own, writes its token and leaves with `_exit`, never
    // returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        drop(reader);
        let token = token_of_a_lock(&node, "fork:child");
        let mut pipe = std::fs::File::from(writer);
        let _ = pipe.write_all(token.as_bytes());
        drop(pipe);
        // SAFETY: ends the child at once, without running the parent's
        // destructors (the test servers belong to the parent).
        unsafe { libc::_exit(0) };
    }
    drop(writer);
    let mut theirs = String::new();
    std::fs::File::from(reader)
        .read_to_string(&mut theirs)
        .expect("the child's token");
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let ours = token_of_a_lock(&node, "fork:parent");
    assert_eq!(theirs.len(), 32, "child token {theirs:?}");
    assert_ne!(theirs, ours, "the child drew the parent's next token");
}
