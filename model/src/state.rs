//! The state the checker explores: nodes, clients, messages in flight, the
//! protected resource, the faults left to inject, and ghost variables that
//! only the properties read.

use crate::config::Config;

/// A set of nodes, one bit each.
pub type Nodes = u8;

/// A set of tokens, one bit each (tokens are small numbers from 1).
pub type Tokens = u16;

/// Bit of `token` in a [`Tokens`] set.
pub fn bit(token: u8) -> Tokens {
    1 << token
}

/// Nodes in a set.
pub fn count(nodes: Nodes) -> usize {
    nodes.count_ones() as usize
}

/// One lock key on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The owner's token.
    pub token: u8,
    /// The tick from which the key is gone (its `PX`, on the node's clock).
    pub expires: u8,
}

/// One Redis node: the lock key, the resource's fence, whether it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// The lock key, when set.
    pub key: Option<Key>,
    /// The stored fence (`quorumlock:fence:{R}`), 0 when none.
    pub fence: u8,
    /// Whether it runs.
    pub up: bool,
    /// Stopped (SIGSTOP): it accepts requests but runs none until resumed.
    pub paused: bool,
    /// When it went down (meaningful while down).
    pub down_since: u8,
    /// Its clock runs fast: it expires keys [`Config::fast`] ticks early.
    pub fast: bool,
    /// Its clock runs beyond the allowance: it expires keys
    /// [`crate::config::ROGUE`] ticks early ([`Config::rogue`]).
    pub rogue: bool,
}

/// A request from a client to a node; each runs on the node as one script.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// `SET NX PX` (plain), `FENCED_ACQUIRE` proposing `guess` (fenced; 0
    /// otherwise).
    Acquire { token: u8, guess: u8 },
    /// `RELEASE`: delete the key if it holds the token.
    Release { token: u8 },
    /// `RENEW` of one lock, for the round that started at `round`.
    Renew { token: u8, round: u8 },
    /// `PROPOSE`: raise the fence to `value` if it is lower.
    Propose { token: u8, value: u8 },
}

/// A request on its way, with the tick it was sent at: the network delays
/// it at most [`Config::delay`] ticks (a paused or crashed node holds it
/// longer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sent {
    pub at: u8,
    pub request: Request,
}

/// What `RENEW` reports for one lock (`RenewStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Renewed {
    /// Our key, its ttl reset.
    Extended,
    /// No key: set again with our token.
    Healed,
    /// No key, and healing is off.
    Missing,
    /// Another owner's key.
    Foreign,
}

/// A node's reply to a request (releases need none: nothing waits on them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// Whether the key was set, the node's fence for the resource, and
    /// whether the node took the token proposed with it.
    Acquire {
        token: u8,
        granted: bool,
        fence: u8,
        accepted: bool,
    },
    /// One lock's renewal status.
    Renew { token: u8, round: u8, status: Renewed },
    /// Whether the proposal was taken, and the node's fence after it.
    Propose {
        token: u8,
        value: u8,
        accepted: bool,
        highest: u8,
    },
}

/// Where a client's current attempt stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between attempts (or done, when no attempt is left).
    Idle,
    /// The acquires are out since `start`.
    Acquiring {
        token: u8,
        start: u8,
        granted: Nodes,
        refused: Nodes,
        /// Highest fence a granting node reported (fenced modes).
        floor: u8,
        /// Granting nodes that accepted the token proposed with the acquire.
        accepted: Nodes,
    },
    /// Phase 2 of a fenced acquisition: `value` proposed since `round_start`.
    Fencing {
        token: u8,
        start: u8,
        value: u8,
        round: u8,
        round_start: u8,
        accepted: Nodes,
        rejected: Nodes,
        highest: u8,
    },
    /// The lock is ours until `valid_until` (exclusive).
    Holding {
        token: u8,
        valid_until: u8,
        /// The fencing token, 0 when unfenced.
        fence: u8,
        /// The acquisition's place in the order of all acquisitions (ghost).
        seq: u8,
        /// Renewal rounds started.
        renewals: u8,
        renewal: Option<Round>,
        /// Its one write is out.
        wrote: bool,
    },
}

/// A watchdog renewal round in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Round {
    pub start: u8,
    pub confirmed: Nodes,
    pub foreign: Nodes,
}

/// One client: its attempts left and where its current one stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub attempts_left: u8,
    pub phase: Phase,
}

/// A holder's write to the protected resource, on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Write {
    /// The writer's fencing token (0 unfenced).
    pub fence: u8,
    /// The writer's acquisition order (ghost).
    pub seq: u8,
}

/// Variables no process reads: what the properties need to know about the
/// past.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ghost {
    /// Fencing tokens issued, one bit each.
    pub issued: u128,
    /// The highest fencing token issued.
    pub highest_issued: u8,
    /// A token was issued twice.
    pub duplicate: bool,
    /// A token was issued that is not above one issued before it.
    pub not_above_earlier: bool,
    /// Tokens whose attempt ended (failed, released or lost).
    pub ended: Tokens,
    /// Per node, tokens whose release to that node was lost (dropped, or the
    /// node was down): those keys may stay until their ttl.
    pub excused: Vec<Tokens>,
    /// Acquisitions so far: the order of the next one (for writes, which
    /// carry it), otherwise saturating at 2 (enough for reachability).
    pub holds: u8,
    /// A renewal round was confirmed by a quorum.
    pub renewed: bool,
    /// A holder was told of a loss.
    pub lost: bool,
    /// The highest acquisition order of a write the resource took.
    pub last_write: u8,
    /// The resource took a write of an earlier acquisition after one of a
    /// later acquisition.
    pub write_out_of_order: bool,
    /// The resource refused a write as stale.
    pub write_refused: bool,
}

/// Everything the checker explores.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The global clock, in ticks.
    pub now: u8,
    pub nodes: Vec<Node>,
    pub clients: Vec<Client>,
    /// Requests per (client, node), FIFO: one connection, as in
    /// `node/conn.rs`. Replies need no channel: a reply is counted when the
    /// request runs, or comes too late to count (`Action::DeliverUncounted`).
    pub to_node: Vec<Vec<Sent>>,
    /// Per client, its write on its way to the resource.
    pub to_resource: Vec<Option<Write>>,
    /// The highest fencing token the resource has seen
    /// (`quorumlock:fence-seen:{R}`).
    pub resource_seen: u8,
    pub crashes_left: u8,
    pub pauses_left: u8,
    pub losses_left: u8,
    pub ghost: Ghost,
}

impl State {
    /// The channel index of (client, node).
    pub fn link(config: &Config, client: usize, node: usize) -> usize {
        client * config.nodes + node
    }

    /// `client` believes it holds the lock now: the library's
    /// `Guard::is_held` (not lost, validity not passed).
    pub fn believes(&self, client: usize) -> bool {
        matches!(self.clients[client].phase, Phase::Holding { valid_until, .. } if self.now < valid_until)
    }
}
