//! The protocol as a `stateright` model: every action the checker may take
//! from a state, what each does, and the properties checked in every state
//! reached.

use stateright::{Model, Property};

use crate::config::{Config, RogueClock};
use crate::state::{Client, Ghost, Node, Phase, Request, State, bit};
use crate::symmetry;

/// One step of a run: a process acts, a message moves, a fault strikes, or
/// the clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The global clock advances a tick: keys expire on each node's clock,
    /// deadlines pass, and the local timer fires a loss at `valid_until`.
    Tick,
    /// A client starts an attempt (`Redlock::try_lock`).
    Start(usize),
    /// A holder's watchdog starts a renewal round.
    Renew(usize),
    /// A holder releases (`Guard::release`).
    Release(usize),
    /// The caller drops an attempt before it decided (a timeout, a
    /// `select!`): the attempt's `Undo` guard sends the release to every
    /// node.
    Cancel(usize),
    /// A holder that believes it holds the lock sends its write.
    Write(usize),
    /// The resource receives a client's write.
    ApplyWrite(usize),
    /// The request at the head of (client, node) runs on the node, and the
    /// client counts the reply.
    Deliver(usize, usize),
    /// The request at the head of (client, node) runs on the node, and its
    /// reply comes too late to count (after the client's decision or
    /// deadline), or never: to the client the same as a lost reply.
    DeliverUncounted(usize, usize),
    /// The request at the head of (client, node) is lost.
    LoseRequest(usize, usize),
    /// A node crashes: its connections drop what they carried.
    Crash(usize),
    /// A crashed node starts again.
    Restart(usize),
    /// A node stops (SIGSTOP): requests wait for it, keys still expire by
    /// its clock.
    Pause(usize),
    /// A paused node runs again (SIGCONT).
    Resume(usize),
}

/// The protocol under one [`Config`].
#[derive(Clone, Debug)]
pub struct Protocol {
    pub config: Config,
    /// Explore one state per renaming of the nodes
    /// ([`symmetry::canonical`]): for exhaustive runs. Off for runs whose
    /// trace is read, so that node numbers stay the same from step to step.
    pub symmetric: bool,
}

impl Protocol {
    /// The first state: nodes up and empty (each fast or not, when the
    /// configuration allows fast clocks), clients idle.
    fn initial(&self, fast: u8) -> State {
        let config = &self.config;
        let links = config.clients * config.nodes;
        State {
            now: 0,
            nodes: (0..config.nodes)
                .map(|n| Node::new(fast & (1 << n) != 0, n == 0 && config.rogue != RogueClock::Off))
                .collect(),
            clients: vec![
                Client {
                    attempts_left: config.attempts,
                    phase: Phase::Idle,
                };
                config.clients
            ],
            to_node: vec![Vec::new(); links],
            to_resource: vec![None; config.clients],
            resource_seen: 0,
            crashes_left: config.crashes,
            pauses_left: config.pauses,
            losses_left: config.losses,
            ghost: Ghost {
                excused: vec![0; config.nodes],
                ..Ghost::default()
            },
        }
    }

    /// `state`, or its canonical form when exploring up to renaming.
    fn canonical(&self, state: State) -> State {
        if self.symmetric {
            symmetry::canonical(state)
        } else {
            state
        }
    }

    /// A request has been on its way for the longest delay the network
    /// allows, to a node that is not paused: it must run (or be lost) before
    /// the clock moves on.
    fn overdue(config: &Config, state: &State) -> bool {
        state.to_node.iter().enumerate().any(|(link, queue)| {
            let node = &state.nodes[link % config.nodes];
            !node.paused
                && queue
                    .first()
                    .is_some_and(|sent| sent.at + config.delay <= state.now)
        })
    }

    /// A release that will not reach `node` leaves its key to its ttl.
    fn excuse(state: &mut State, node: usize, request: Request) {
        if let Request::Release { token } = request {
            state.ghost.excused[node] |= bit(token);
        }
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    /// Nodes are interchangeable, so the fast ones are the first k, for
    /// every k (every other choice is one of these with nodes renamed).
    fn init_states(&self) -> Vec<State> {
        let most = if self.config.fast > 0 {
            self.config.nodes
        } else {
            0
        };
        (0..=most)
            .map(|k| self.canonical(self.initial(((1u16 << k) - 1) as u8)))
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let config = &self.config;
        if state.now < config.horizon && !Protocol::overdue(config, state) {
            actions.push(Action::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            match client.phase {
                Phase::Idle if client.attempts_left > 0 => actions.push(Action::Start(c)),
                Phase::Acquiring { .. } | Phase::Fencing { .. } => actions.push(Action::Cancel(c)),
                Phase::Holding {
                    renewals,
                    renewal,
                    wrote,
                    ..
                } => {
                    if renewal.is_none() && renewals < config.renewals {
                        actions.push(Action::Renew(c));
                    }
                    if config.writes && !wrote && state.believes(c) {
                        actions.push(Action::Write(c));
                    }
                    actions.push(Action::Release(c));
                }
                _ => {}
            }
            if state.to_resource[c].is_some() {
                actions.push(Action::ApplyWrite(c));
            }
            for n in 0..config.nodes {
                let link = State::link(config, c, n);
                if let Some(sent) = state.to_node[link].first()
                    && !state.nodes[n].paused
                {
                    actions.push(Action::Deliver(c, n));
                    // A release has no reply to count.
                    if !matches!(sent.request, Request::Release { .. }) {
                        actions.push(Action::DeliverUncounted(c, n));
                    }
                    if state.losses_left > 0 {
                        actions.push(Action::LoseRequest(c, n));
                    }
                }
            }
        }
        for (n, node) in state.nodes.iter().enumerate() {
            if node.up && state.crashes_left > 0 {
                actions.push(Action::Crash(n));
            }
            if node.may_restart(config, state.now) {
                actions.push(Action::Restart(n));
            }
            if node.up && !node.paused && state.pauses_left > 0 {
                actions.push(Action::Pause(n));
            }
            if node.paused {
                actions.push(Action::Resume(n));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let config = &self.config;
        let mut state = last.clone();
        match action {
            Action::Tick => {
                state.now += 1;
                for node in &mut state.nodes {
                    node.expire(state.now);
                }
                for c in 0..config.clients {
                    state.client_timers(config, c);
                }
            }
            Action::Start(c) => state.start_attempt(config, c),
            Action::Renew(c) => state.start_renewal(config, c),
            Action::Release(c) => state.release(config, c),
            Action::Cancel(c) => state.cancel(config, c),
            Action::Write(c) => state.write(c),
            Action::ApplyWrite(c) => state.apply_write(config, c),
            Action::Deliver(c, n) | Action::DeliverUncounted(c, n) => {
                let request = state.to_node[State::link(config, c, n)].remove(0).request;
                if state.nodes[n].up {
                    let now = state.now;
                    let reply = state.nodes[n].run(config, now, request);
                    if let (Some(reply), Action::Deliver(..)) = (reply, action) {
                        state.receive(config, c, n, reply);
                    }
                } else {
                    Protocol::excuse(&mut state, n, request);
                }
            }
            Action::LoseRequest(c, n) => {
                let request = state.to_node[State::link(config, c, n)].remove(0).request;
                Protocol::excuse(&mut state, n, request);
                state.losses_left -= 1;
            }
            Action::Crash(n) => {
                let now = state.now;
                state.nodes[n].crash(config, now);
                state.crashes_left -= 1;
                for c in 0..config.clients {
                    let link = State::link(config, c, n);
                    for sent in std::mem::take(&mut state.to_node[link]) {
                        Protocol::excuse(&mut state, n, sent.request);
                    }
                }
            }
            Action::Pause(n) => {
                state.nodes[n].paused = true;
                state.pauses_left -= 1;
            }
            Action::Resume(n) => state.nodes[n].paused = false,
            Action::Restart(n) => {
                let now = state.now;
                state.nodes[n].up = true;
                state.nodes[n].expire(now);
            }
        }
        Some(self.canonical(state))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(MUTUAL_EXCLUSION, |model: &Protocol, state: &State| {
                (0..model.config.clients).filter(|&c| state.believes(c)).count() <= 1
            }),
            Property::always(FENCING, |_, state: &State| {
                !state.ghost.duplicate && !state.ghost.not_above_earlier
            }),
            Property::always(NO_LEAK, |model: &Protocol, state: &State| {
                no_leak(&model.config, state)
            }),
            Property::always(LOSS_SIGNALLED, |_, state: &State| {
                state.clients.iter().all(|client| match client.phase {
                    Phase::Holding {
                        token, valid_until, ..
                    } => state.now < valid_until && state.ghost.ended & bit(token) == 0,
                    _ => true,
                })
            }),
            Property::always(WRITES_IN_ORDER, |_, state: &State| {
                !state.ghost.write_out_of_order
            }),
            Property::sometimes(REACH_HANDOVER, |_, state: &State| state.ghost.holds >= 2),
            Property::sometimes(REACH_LOSS, |_, state: &State| state.ghost.lost),
        ];
        if self.config.renewals > 0 {
            properties.push(Property::sometimes(REACH_RENEWAL, |_, state: &State| {
                state.ghost.renewed
            }));
        }
        if self.config.fencing != crate::config::Fencing::Off {
            properties.push(Property::sometimes(REACH_TOKENS, |_, state: &State| {
                state.ghost.issued.count_ones() >= 2
            }));
        }
        if self.config.writes {
            properties.push(Property::sometimes(REACH_WRITES, |_, state: &State| {
                state.ghost.last_write >= 2
            }));
        }
        properties
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.now <= self.config.horizon
    }
}

/// Property 1: no two clients both believe they hold the lock.
pub const MUTUAL_EXCLUSION: &str = "mutual exclusion";
/// Property 2: fencing tokens are unique, and each is above every token
/// issued before it: they grow in the order the holders took the lock.
pub const FENCING: &str = "fencing tokens only grow";
/// Property 3: a key of an ended attempt is on a node only while its
/// release is on the way there, or where that release was lost (the key then
/// ends with its own ttl).
pub const NO_LEAK: &str = "no leak";
/// Property 4: a holder's lock counts as held only inside its validity, and
/// a lock that ended is never held again.
pub const LOSS_SIGNALLED: &str = "loss signalled by the end of the validity";
/// Property 5: the resource never takes a write of an earlier holder after
/// one of a later holder.
pub const WRITES_IN_ORDER: &str = "writes in holder order";
/// Reachability: the lock was acquired twice.
pub const REACH_HANDOVER: &str = "the lock changes hands";
/// Reachability: a holder was told of a loss.
pub const REACH_LOSS: &str = "a loss is signalled";
/// Reachability: a renewal was confirmed.
pub const REACH_RENEWAL: &str = "a renewal is confirmed";
/// Reachability: two fencing tokens were issued.
pub const REACH_TOKENS: &str = "two fencing tokens are issued";
/// Reachability: the resource took writes of two holders.
pub const REACH_WRITES: &str = "two holders write";

/// Property 3's check: every key of an ended token is accounted for.
fn no_leak(config: &Config, state: &State) -> bool {
    state.nodes.iter().enumerate().all(|(n, node)| {
        let Some(key) = node.key else { return true };
        if state.ghost.ended & bit(key.token) == 0 {
            return true;
        }
        let link = State::link(config, config.owner(key.token), n);
        state.ghost.excused[n] & bit(key.token) != 0
            || state.to_node[link]
                .iter()
                .any(|sent| sent.request == Request::Release { token: key.token })
    })
}
