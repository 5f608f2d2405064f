//! What the test kit's consensus stores share: the processes of N members
//! (etcd members, ZooKeeper servers) on free loopback ports, in a temporary
//! directory of their own with one log file per member; started until they
//! serve under one leader, killed, restarted and paused one at a time, and
//! killed and reaped when dropped. What differs from store to store (the
//! command that runs a member, how to tell that the members serve) is the
//! store's [`Store`]. Like the rest of the kit, everything here blocks.

use std::fmt;
use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::pause::Paused;
use crate::server::{fresh_dir, hold_port};

/// How many fresh sets of ports to try when another process takes one of
/// ours between finding it free and a member binding it.
const PORT_ATTEMPTS: usize = 5;

/// A kind of consensus store, as [`MemberSet`] runs its members: how to
/// run a member, the probes that tell whether the members serve, how long
/// to wait for them, and what messages and files call them. `set.store` is
/// the store's own state (e.g. what it learned about its members).
pub(crate) trait Store: Clone + fmt::Debug + Sized {
    /// How many ports each member listens on; the first is the clients'.
    const PORTS: usize;

    /// What to tell a user whose machine does not have the store.
    const INSTALL_HINT: &'static str;

    /// The command that runs member `i` (stdin, stdout and stderr are set
    /// by the caller), once the files it needs are written.
    fn command(set: &MemberSet<Self>, i: usize) -> io::Result<Command>;

    /// How long the members may take to serve under their first leader,
    /// and a restarted member to rejoin.
    const STARTUP_TIMEOUT: Duration;

    /// Whether every member serves, all under one leader: what a start
    /// waits for. It may keep what it learns in `set.store`.
    fn formed(set: &mut MemberSet<Self>) -> bool;

    /// Whether member `i` answers and serves (after a restart).
    fn serves(set: &MemberSet<Self>, i: usize) -> bool;

    /// How long [`MemberSet::leader`] waits for the members to agree.
    const LEADER_TIMEOUT: Duration;

    /// The running leader that the running members that answer agree on.
    fn agreed_leader(set: &MemberSet<Self>) -> Option<usize>;

    /// What messages call the whole: `etcd cluster`.
    const GROUP: &'static str;

    /// What messages call one member: `etcd member`.
    const MEMBER: &'static str;

    /// The first letter of a member's name (`m`: `m0`, `m1`, ...), which
    /// also names its files in the directory.
    const PREFIX: &'static str;

    /// What the temporary directory is named after: `etcd`.
    const KIND: &'static str;

    /// What the members say of themselves, for failure messages.
    fn describe(set: &MemberSet<Self>) -> String;
}

/// One member: its ports (kept across restarts) and its process.
#[derive(Debug)]
struct Member {
    ports: Vec<u16>,
    child: Option<Child>,
    /// While the member is killed, its ports bound but not listening:
    /// refused as by a dead process (so that the others do not wait for a
    /// connect timeout), and handed to no other process.
    port_holds: Vec<tokio::net::TcpSocket>,
}

/// The member processes of one store on 127.0.0.1.
#[derive(Debug)]
pub(crate) struct MemberSet<S: Store> {
    dir: PathBuf,
    members: Vec<Member>,
    /// The store's own state.
    pub(crate) store: S,
}

impl<S: Store> MemberSet<S> {
    /// Starts `n` members and waits until they serve under one leader,
    /// panicking with their logs when they do not.
    pub(crate) fn start(n: usize, store: S) -> MemberSet<S> {
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let mut set = Self::fresh(n, store.clone()).unwrap_or_else(|e| panic!("{}: {e}", S::GROUP));
            match set.boot() {
                Ok(()) => return set,
                // Someone took one of the ports in the meantime: try others.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_error = Some(e),
                Err(e) => panic!("{e}"),
            }
        }
        panic!("{}", last_error.expect("at least one attempt"));
    }

    /// The number of members, running or not.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// The ports of member `i`, the client port first (kept across
    /// restarts).
    pub(crate) fn ports(&self, i: usize) -> &[u16] {
        &self.members[i].ports
    }

    /// The client port of member `i`.
    pub(crate) fn client_port(&self, i: usize) -> u16 {
        self.members[i].ports[0]
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`: the client ports of members `which`.
    pub(crate) fn hosts(&self, which: impl IntoIterator<Item = usize>) -> String {
        let hosts: Vec<String> = which
            .into_iter()
            .map(|i| format!("127.0.0.1:{}", self.client_port(i)))
            .collect();
        hosts.join(",")
    }

    /// The directory of the members' data and logs.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Member `i`'s name: the prefix and its index.
    pub(crate) fn name(&self, i: usize) -> String {
        format!("{}{i}", S::PREFIX)
    }

    /// A file (or directory) of member `i`: its name and `suffix` in the
    /// directory (`""` names its data dir).
    pub(crate) fn path(&self, i: usize, suffix: &str) -> PathBuf {
        self.dir.join(format!("{}{suffix}", self.name(i)))
    }

    /// The index of the leader that the running members agree on, waiting
    /// (polling) up to the store's leader timeout, e.g. during an election;
    /// panics with the logs when they do not.
    pub(crate) fn leader(&self) -> usize {
        poll(S::LEADER_TIMEOUT, || S::agreed_leader(self)).unwrap_or_else(|| {
            panic!(
                "{}s never agreed on a running leader; {}\n{}",
                S::MEMBER,
                S::describe(self),
                self.logs()
            )
        })
    }

    /// SIGKILLs member `i` and reaps it (a crash); its data dir stays, and
    /// its ports are held until a restart. Idempotent.
    pub(crate) fn kill(&mut self, i: usize) {
        let member = &mut self.members[i];
        if let Some(mut child) = member.child.take() {
            // A SIGSTOPped process dies on SIGKILL too.
            let _ = child.kill();
            let _ = child.wait();
            member.port_holds = member.ports.iter().copied().filter_map(hold_port).collect();
        }
    }

    /// Kills member `i` if it runs and starts it again on the same ports
    /// and data dir, then waits until it serves and the running members
    /// agree on a leader; panics with its log when it does not.
    pub(crate) fn restart(&mut self, i: usize) {
        self.kill(i);
        let name = self.name(i);
        self.spawn(i)
            .unwrap_or_else(|e| panic!("{} {name}: {e}", S::MEMBER));
        let mut exited = None;
        let rejoined = poll(S::STARTUP_TIMEOUT, || {
            exited = self.exited(i);
            let serves = S::serves(self, i);
            (exited.is_some() || serves && S::agreed_leader(self).is_some()).then_some(())
        });
        if rejoined.is_none() || exited.is_some() {
            let why = exited.map_or("did not rejoin".into(), |e| format!("exited ({e})"));
            panic!(
                "{} {name} {why} after a restart; log:\n{}",
                S::MEMBER,
                self.log(i)
            );
        }
    }

    /// Freezes member `i` with SIGSTOP until the returned guard is dropped
    /// (SIGCONT).
    pub(crate) fn pause(&self, i: usize) -> Paused {
        let pid = self.pids()[i];
        Paused::stop(pid.unwrap_or_else(|| panic!("pause: {} {} is not running", S::MEMBER, self.name(i))))
    }

    /// Whether member `i` has been started and not killed (a paused member
    /// is running).
    pub(crate) fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// The indexes of the running members.
    pub(crate) fn running(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.is_running(i)).collect()
    }

    /// Member `i`'s log so far (its stdout and stderr, across restarts).
    pub(crate) fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.path(i, ".log")).unwrap_or_default()
    }

    /// Every member's log, for failure messages.
    pub(crate) fn logs(&self) -> String {
        (0..self.len())
            .map(|i| {
                format!(
                    "--- {}, port {}:\n{}",
                    self.name(i),
                    self.client_port(i),
                    self.log(i)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The process id of each member, while it runs.
    pub(crate) fn pids(&self) -> Vec<Option<u32>> {
        self.members
            .iter()
            .map(|m| m.child.as_ref().map(Child::id))
            .collect()
    }

    /// `n` members on fresh ports and in a fresh directory, none of them
    /// started yet.
    fn fresh(n: usize, store: S) -> io::Result<MemberSet<S>> {
        let dir = fresh_dir(S::KIND)?;
        let ports = free_ports(S::PORTS * n)?;
        let members = ports
            .chunks(S::PORTS)
            .map(|ports| Member {
                ports: ports.to_vec(),
                child: None,
                port_holds: Vec::new(),
            })
            .collect();
        Ok(MemberSet { dir, members, store })
    }

    /// Spawns every member and waits until the store says they serve
    /// under one leader; `AddrInUse` when a member lost one of its ports.
    fn boot(&mut self) -> io::Result<()> {
        for i in 0..self.len() {
            self.spawn(i)?;
        }
        let mut exited = None;
        let booted = poll(S::STARTUP_TIMEOUT, || {
            exited = (0..self.len()).find_map(|i| self.exited(i).map(|e| (i, e)));
            (exited.is_some() || S::formed(self)).then_some(())
        });
        if booted.is_some() && exited.is_none() {
            return Ok(());
        }
        let why = exited.map_or("no leader in time".into(), |(i, e)| {
            format!("{} exited ({e})", self.name(i))
        });
        let logs = self.logs();
        // A member that lost one of its ports to another process (Go's
        // "address already in use", Java's "Address already in use").
        let kind = match logs.to_lowercase().contains("address already in use") {
            true => io::ErrorKind::AddrInUse,
            false => io::ErrorKind::Other,
        };
        let message = format!("{} did not start: {why}; {}\n{logs}", S::GROUP, S::describe(self));
        Err(io::Error::new(kind, message))
    }

    /// Starts member `i`'s process (without waiting for it).
    fn spawn(&mut self, i: usize) -> io::Result<()> {
        let mut command = S::command(self, i)?;
        // Appended, so that a restarted member's log follows its earlier life.
        let log = File::options()
            .append(true)
            .create(true)
            .open(self.path(i, ".log"))?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        let child = command.spawn().map_err(|e| with_hint(e, S::INSTALL_HINT))?;
        self.members[i].port_holds.clear();
        self.members[i].child = Some(child);
        Ok(())
    }

    /// How member `i` ended, when its process has exited on its own.
    fn exited(&mut self, i: usize) -> Option<ExitStatus> {
        self.members[i].child.as_mut()?.try_wait().ok().flatten()
    }
}

impl<S: Store> Drop for MemberSet<S> {
    fn drop(&mut self) {
        for i in 0..self.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Calls `condition` every 20 ms until it gives a value, or `None` once
/// `limit` has passed.
pub(crate) fn poll<T>(limit: Duration, mut condition: impl FnMut() -> Option<T>) -> Option<T> {
    let started = Instant::now();
    loop {
        if let Some(value) = condition() {
            return Some(value);
        }
        if started.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `n` distinct ports that were free a moment ago: all bound at once, so
/// that the OS cannot hand out one twice, then released for the members.
pub(crate) fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    listeners.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// `e`, or `hint` (what to install) when the program was not found.
pub(crate) fn with_hint(e: io::Error, hint: &str) -> io::Error {
    match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(io::ErrorKind::NotFound, hint),
        _ => e,
    }
}

/// The public methods that a store's type (an `EtcdCluster`, a
/// `ZkEnsemble`) hands on to its [`MemberSet`] in field `$set`, written
/// once. `$member` is what their docs call a member (`member`, `server`);
/// `$leader` and `$restart` end the docs of `leader` and `restart` with
/// what the store does there.
macro_rules! member_methods {
    ($set:ident, $member:literal, leader: $leader:literal, restart: $restart:literal $(,)?) => {
        #[doc = concat!("The client port of ", $member, " `i` (kept across restarts).")]
        pub fn client_port(&self, i: usize) -> u16 {
            self.$set.client_port(i)
        }

        #[doc = concat!("The number of ", $member, "s, running or not.")]
        pub fn len(&self) -> usize {
            self.$set.len()
        }

        #[doc = concat!("The index of the leader that the running ", $member, "s that answer")]
        /// agree on, waiting (polling) up to a few seconds for them to agree,
        /// e.g. during an election; panics with the logs when they do not.
        #[doc = $leader]
        pub fn leader(&self) -> usize {
            self.$set.leader()
        }

        #[doc = concat!("SIGKILLs ", $member, " `i` and reaps it (a crash); its data dir stays,")]
        /// and its ports are held until a restart. Idempotent.
        pub fn kill(&mut self, i: usize) {
            self.$set.kill(i);
        }

        #[doc = concat!("Kills ", $member, " `i` if it runs and starts it again with the same")]
        /// name, ports and data dir, then waits until it serves and the
        #[doc = concat!("running ", $member, "s agree on a leader; panics with its log when it")]
        /// does not.
        #[doc = $restart]
        pub fn restart(&mut self, i: usize) {
            self.$set.restart(i);
        }

        #[doc = concat!("Freezes ", $member, " `i` with SIGSTOP until the returned guard is")]
        /// dropped (SIGCONT). While frozen, connects succeed but requests
        /// hang, and the others stop hearing from it.
        pub fn pause(&self, i: usize) -> $crate::pause::Paused {
            self.$set.pause(i)
        }

        #[doc = concat!("Whether ", $member, " `i` has been started and not killed (a paused")]
        #[doc = concat!($member, " is running).")]
        pub fn is_running(&self, i: usize) -> bool {
            self.$set.is_running(i)
        }

        #[doc = concat!("The log of ", $member, " `i` so far (its stdout and stderr, across")]
        /// restarts).
        pub fn log(&self, i: usize) -> String {
            self.$set.log(i)
        }

        #[doc = concat!("The process id of each ", $member, ", while it runs.")]
        pub fn pids(&self) -> Vec<Option<u32>> {
            self.$set.pids()
        }
    };
}

pub(crate) use member_methods;
