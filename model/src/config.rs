//! What a checked configuration fixes: the cluster, the clients, the timing
//! rules in ticks, the faults allowed, and which rule of the protocol is
//! kept or broken (the negative controls).
//!
//! Time is counted in ticks of one global (real) clock. A tick stands for
//! the per-node timeout ([`TIMEOUT`]); the ttl is a few of them, as in the
//! library, where the per-node timeout is small next to the ttl.

/// The lock's ttl in ticks: `ttl` of `Redlock::lock` and the `PX` of the
/// acquire script (`ACQUIRE` in `quorumlock/src/backend/redlock/wire/lock.rs`).
///
/// Four ticks, so that an acquisition, a renewal inside the validity
/// (`RENEW_DIVISOR` in `quorumlock/src/config.rs` puts it at a third of the
/// ttl) and the end of a validity are distinct instants, while the state
/// space stays small.
pub const TTL: u8 = 4;

/// The drift allowance in ticks: what `quorum::validity` subtracts
/// (`DEFAULT_DRIFT_FACTOR` and `DEFAULT_DRIFT_FIXED` in
/// `quorumlock/src/config.rs`). It must cover how much earlier than the ttl
/// a node's clock can expire a key.
pub const DRIFT: u8 = 1;

/// How much earlier than the ttl a fast node expires a key, in ticks: a node
/// clock running `TTL / (TTL - FAST)` times real speed. Equal to the drift
/// allowance in the safe configurations: the largest rate error it covers.
pub const FAST: u8 = 1;

/// How much earlier than the ttl the rogue node expires a key, in ticks
/// ([`RogueClock`]): a clock running at twice real speed, twice as far from
/// the ttl as the drift allowance covers.
pub const ROGUE: u8 = 2;

/// The per-node timeout in ticks: how long an attempt, a fence proposal or
/// a renewal round counts replies before deciding with what it has
/// (`RedlockBuilder::node_timeout`, `DEFAULT_NODE_TIMEOUT`).
pub const TIMEOUT: u8 = 1;

/// Node clock ticks per model tick, as the fence floor sees them: the fenced
/// acquire script floors the fence at the node's `TIME` in microseconds
/// (`FENCED_ACQUIRE` in `quorumlock/src/backend/redlock/wire/fence.rs`). Larger than the
/// proposals that fit in one tick, as a microsecond clock outruns the
/// proposals that fit in a microsecond.
pub const FENCE_SCALE: u8 = 8;

/// How far ahead of its clock a node accepts the token a fenced acquire
/// proposes with its grant (`FENCE_AHEAD` in `quorumlock/src/config.rs`):
/// tokens stay within this of the node clocks, which the time floor after
/// a restart relies on.
pub const FENCE_AHEAD: u8 = FENCE_SCALE;

/// The token a fenced attempt started at `start` proposes with its acquire:
/// the client's reading of the node clocks a tick ahead, so that the nodes
/// it reaches in the same tick accept it and those it reaches a tick late
/// refuse it (the library's `FENCE_LEAD` covers a one-way trip).
pub fn fence_guess(start: u8) -> u8 {
    (start + 1) * FENCE_SCALE
}

/// Proposal rounds of one fenced acquisition before it gives up
/// (`FENCE_ROUNDS` in `quorumlock/src/config.rs` is larger; two already
/// show a retry above the highest reply).
pub const FENCE_ROUNDS: u8 = 2;

/// What survives a node's crash, and how soon it may restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Persistence {
    /// `appendfsync always`: keys and fences come back, with their expiry in
    /// absolute time (Redis drops keys that expired while it was down).
    Aof,
    /// Nothing survives, and the node stays down at least a ttl before it
    /// restarts (the rule in docs/operations.md for nodes without
    /// persistence).
    NoneDelayed,
    /// Nothing survives and the node may come back a tick later: breaks
    /// mutual exclusion, a negative control.
    NoneImmediate,
}

/// A minority node whose clock runs beyond the drift allowance, and what
/// the clients know of its rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RogueClock {
    /// Every clock within the allowance ([`Config::fast`]).
    Off,
    /// Node 0 expires keys [`ROGUE`] ticks early, from the start, and the
    /// clients count every rate as 1: a client before its first clock
    /// readings, or plain Redlock. A negative control.
    Unmeasured,
    /// The same node, and the clients know its rate (they have read its
    /// clock before they contend): a lock lasts until the granting nodes
    /// can have forgotten it (`Quorum::life` in `quorumlock/src/backend/redlock/quorum/mod.rs`).
    Measured,
}

/// How fencing tokens are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fencing {
    /// Plain lock: no token.
    Off,
    /// The library's protocol (`quorumlock/src/backend/redlock/fence.rs`): phase 1
    /// proposes a token ([`fence_guess`]) that each granting node accepts
    /// if it is above its fence floor and within [`FENCE_AHEAD`] of its
    /// clock, and reads the floor; without a majority of acceptances,
    /// phase 2 proposes `max + 1` to all nodes, each accepting only while
    /// it holds the proposer's key, and needs a majority of acceptances.
    Majority,

    /// One round: each granting node `INCR`s its fence and the token is the
    /// largest reply. Issues duplicate and smaller tokens: a negative control.
    NaiveIncr,
}

/// A configuration to check: every field is a choice the checker explores
/// within, or a rule of the protocol kept or broken.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// A name for reports.
    pub name: &'static str,
    /// Redis nodes.
    pub nodes: usize,
    /// Clients competing for the one resource.
    pub clients: usize,
    /// Attempts per client (each acquisition, failed or not, is one).
    pub attempts: u8,
    /// Watchdog renewal rounds per hold (confirmed or not).
    pub renewals: u8,
    /// The last tick the checker explores.
    pub horizon: u8,
    /// The client's drift allowance in ticks ([`DRIFT`]).
    pub drift: u8,
    /// How much earlier a fast node expires a key ([`FAST`]); every node is
    /// explored both fast and not.
    pub fast: u8,
    /// A node whose clock runs beyond the allowance (checked with the plain
    /// lock: the fenced path does not keep which nodes granted).
    pub rogue: RogueClock,
    /// What survives a crash.
    pub persistence: Persistence,
    /// Node crashes allowed in a run.
    pub crashes: u8,
    /// Node pauses allowed in a run; a paused node holds its requests for
    /// as long as it stays paused, beyond [`Config::delay`].
    pub pauses: u8,
    /// The longest the network holds a request, in ticks: a request sent at
    /// tick `t` runs or is lost before tick `t + delay + 1` begins, unless
    /// its node is paused. One tick is the per-node timeout, so a request
    /// can still arrive after its attempt gave up.
    pub delay: u8,
    /// Messages (requests or replies) that may be lost in a run. Delay needs
    /// no budget: any message may wait in its channel for any number of
    /// ticks (a slow network, a paused node, a paused client).
    pub losses: u8,
    /// How fencing tokens are made.
    pub fencing: Fencing,
    /// Holders write to a protected resource once per hold; the write may be
    /// delayed any number of ticks (the holder paused after its check). With
    /// fencing the resource refuses tokens below the highest it has seen
    /// (`FENCED_WRITE`); without, it takes every write.
    pub writes: bool,
    /// Renewals re-create the key where a node lost it (`heal`, the
    /// library's default for the watchdog).
    pub heal: bool,
    /// A release deletes the key only when it holds the releaser's token
    /// (`RELEASE`); `false` is the negative control of a blind `DEL`.
    pub release_checks_token: bool,
    /// A failed attempt is released on every node that did not refuse it,
    /// also those that have not answered (`attempt` in
    /// `quorumlock/src/backend/redlock/attempt.rs`); `false` releases only where the
    /// attempt saw a grant (a negative control).
    pub undo_unanswered: bool,
    /// Nodes that must confirm a renewal; `None` is a majority
    /// (`Tally::reached`). `Some(1)` with 3 nodes is the negative control of
    /// an extend that succeeds on a minority.
    pub renew_quorum: Option<usize>,
}

impl Config {
    /// The library as it is, plain lock with the watchdog, and no fault: 2
    /// clients with one attempt each, network delay under a tick. Every
    /// checked configuration starts from here and turns on what it checks.
    pub fn base(nodes: usize) -> Config {
        Config {
            name: "no faults",
            nodes,
            clients: 2,
            attempts: 1,
            renewals: 1,
            horizon: 8,
            drift: DRIFT,
            fast: 0,
            rogue: RogueClock::Off,
            persistence: Persistence::Aof,
            crashes: 0,
            pauses: 0,
            delay: 0,
            losses: 0,
            fencing: Fencing::Off,
            writes: false,
            heal: true,
            release_checks_token: true,
            undo_unanswered: true,
            renew_quorum: None,
        }
    }

    /// Node clocks fast inside the drift allowance, and a lost message.
    pub fn clocks_and_loss(nodes: usize) -> Config {
        Config {
            name: "fast clocks, a lost message",
            fast: FAST,
            losses: 1,
            ..Config::base(nodes)
        }
    }

    /// A node crash with AOF persistence.
    pub fn crash(nodes: usize) -> Config {
        Config {
            name: "a crash (AOF)",
            crashes: 1,
            ..Config::base(nodes)
        }
    }

    /// A node paused (SIGSTOP) for any number of ticks: requests to it
    /// run late, after their attempt gave up or their lock ended.
    pub fn pause(nodes: usize) -> Config {
        Config {
            name: "a node paused",
            pauses: 1,
            ..Config::base(nodes)
        }
    }

    /// A node crash without persistence, restarted after the delay rule.
    pub fn delayed_restart(nodes: usize) -> Config {
        Config {
            name: "a crash without persistence, delayed restart",
            persistence: Persistence::NoneDelayed,
            crashes: 1,
            ..Config::base(nodes)
        }
    }

    /// Network delay past the per-node timeout: a request may arrive a tick
    /// after its attempt gave up.
    pub fn late_requests(nodes: usize) -> Config {
        Config {
            name: "requests a tick late",
            delay: 1,
            ..Config::base(nodes)
        }
    }

    /// Fencing tokens and fenced writes, with a node that restarts empty
    /// (after the delay), which is what the fence's time floor is for, and
    /// a holder paused before its write lands.
    pub fn fenced(nodes: usize) -> Config {
        Config {
            name: "fenced, a crash without persistence",
            fencing: Fencing::Majority,
            writes: true,
            renewals: 0,
            persistence: Persistence::NoneDelayed,
            crashes: 1,
            ..Config::base(nodes)
        }
    }

    /// A node whose clock runs twice as fast, beyond the drift allowance,
    /// whose rate the clients know; a lost message lets a holder take a bare
    /// majority with it, and a renewal may confirm on one.
    pub fn rogue_measured(nodes: usize) -> Config {
        Config {
            name: "a clock beyond the allowance, measured",
            rogue: RogueClock::Measured,
            losses: 1,
            ..Config::base(nodes)
        }
    }

    /// The safe configurations CI checks exhaustively.
    pub fn all_safe(nodes: usize) -> Vec<Config> {
        vec![
            Config::base(nodes),
            Config::clocks_and_loss(nodes),
            Config::crash(nodes),
            Config::pause(nodes),
            Config::delayed_restart(nodes),
            Config::late_requests(nodes),
            Config::fenced(nodes),
            Config::rogue_measured(nodes),
        ]
    }

    /// Every fault at once, for the deeper runs of the command-line checker.
    pub fn all_faults(nodes: usize) -> Config {
        Config {
            name: "every fault at once",
            fast: FAST,
            losses: 1,
            crashes: 1,
            pauses: 1,
            delay: 1,
            ..Config::base(nodes)
        }
    }

    /// Negative control: no drift allowance while node clocks run fast.
    pub fn no_drift(nodes: usize) -> Config {
        Config {
            name: "drift allowance 0, fast clocks",
            drift: 0,
            fast: FAST,
            ..Config::base(nodes)
        }
    }

    /// Negative control: the same node beyond the allowance, its rate not
    /// measured: the lost message lets the holder take a bare majority with
    /// it, which forgets the key before the validity ends.
    pub fn rogue_unmeasured(nodes: usize) -> Config {
        Config {
            name: "a clock beyond the allowance, unmeasured",
            rogue: RogueClock::Unmeasured,
            ..Config::rogue_measured(nodes)
        }
    }

    /// Negative control: a node without persistence restarts at once. (The
    /// lost message lets the holder take a bare majority, so that one node
    /// forgetting is enough.)
    pub fn immediate_restart(nodes: usize) -> Config {
        Config {
            name: "restart without persistence at once",
            persistence: Persistence::NoneImmediate,
            crashes: 1,
            losses: 1,
            ..Config::base(nodes)
        }
    }

    /// Negative control: the one-round fence (`INCR` on each granting node,
    /// the largest reply is the token).
    pub fn naive_fence(nodes: usize) -> Config {
        Config {
            name: "one-round INCR fence",
            fencing: Fencing::NaiveIncr,
            writes: false,
            crashes: 0,
            attempts: 2,
            ..Config::fenced(nodes)
        }
    }

    /// Negative control: a release that deletes without comparing tokens.
    pub fn blind_release(nodes: usize) -> Config {
        Config {
            name: "release without a token check",
            release_checks_token: false,
            clients: 3,
            ..Config::base(nodes)
        }
    }

    /// Negative control: a renewal that one node's confirmation is enough
    /// for.
    pub fn minority_extend(nodes: usize) -> Config {
        Config {
            name: "extend confirmed by a minority",
            renew_quorum: Some(1),
            // One lost acquire leaves the holder a bare majority, one lost
            // renewal leaves a node of it to expire.
            losses: 2,
            ..Config::base(nodes)
        }
    }

    /// Negative control: a failed attempt released only where a grant was
    /// seen, not where the reply never came.
    pub fn undo_granted_only(nodes: usize) -> Config {
        Config {
            name: "undo only where granted",
            undo_unanswered: false,
            ..Config::base(nodes)
        }
    }

    /// Negative control: the plain lock's holder writes, and the write lands
    /// late (the holder paused after its check), with no fence to stop it.
    pub fn unfenced_writes(nodes: usize) -> Config {
        Config {
            name: "unfenced writes after a pause",
            writes: true,
            ..Config::base(nodes)
        }
    }

    /// Majority quorum of all nodes (`quorum::quorum`).
    pub fn quorum(&self) -> usize {
        self.nodes / 2 + 1
    }

    /// Confirmations a renewal needs.
    pub fn renew_quorum(&self) -> usize {
        self.renew_quorum.unwrap_or(self.quorum())
    }

    /// The token of `client`'s attempt number `attempt` (from 0): unique per
    /// acquisition, as the library's 128 random bits are; 0 is no token.
    pub fn token(&self, client: usize, attempt: u8) -> u8 {
        (client as u8) * self.attempts + attempt + 1
    }

    /// Which client an attempt's token belongs to.
    pub fn owner(&self, token: u8) -> usize {
        usize::from((token - 1) / self.attempts)
    }

    /// The same configuration explored further: a second attempt per
    /// client and a later horizon, for the deeper runs of the command-line
    /// checker.
    pub fn deeper(self) -> Config {
        Config {
            attempts: self.attempts + 1,
            horizon: self.horizon + 3,
            ..self
        }
    }
}
