//! What a client does: start an attempt, count replies, decide, propose a
//! fence, renew, release, notice a loss. Each function is one step of the
//! library's code, named where it lives.

use crate::config::{Config, FENCE_ROUNDS, Fencing, ROGUE, RogueClock, TIMEOUT, TTL, fence_guess};
use crate::state::{Nodes, Phase, Renewed, Reply, Request, Round, Sent, State, Write, bit, count};

/// Every node of the configuration.
fn all(config: &Config) -> Nodes {
    ((1u16 << config.nodes) - 1) as Nodes
}

/// How long keys set at one instant on the nodes `granted` keep every other
/// owner from a majority, as the client counts it (`Quorum::life`): until
/// `granted + quorum - N` of them can have forgotten the keys. With one
/// node beyond the allowance (in `rogue`, a set), that is the ttl less its
/// lead when it granted and it alone can make the difference; the client
/// knows its rate only when measured. Clocks within the allowance count as
/// exact (the drift covers them).
fn life(config: &Config, rogue: Nodes, granted: Nodes) -> u8 {
    let forgetting = (count(granted) + config.quorum()).saturating_sub(config.nodes);
    if config.rogue == RogueClock::Measured && granted & rogue != 0 && forgetting <= 1 {
        TTL - ROGUE
    } else {
        TTL
    }
}

impl State {
    /// The nodes whose clock runs beyond the allowance.
    fn rogue(&self) -> Nodes {
        (0..self.nodes.len())
            .filter(|&n| self.nodes[n].rogue)
            .fold(0, |set, n| set | (1 << n))
    }

    /// Sends `request` from `client` to every node in `to`, each on its own
    /// connection (a node that is down drops it when it arrives).
    ///
    /// A checked release is not sent where it cannot act: the node does not
    /// hold the token and nothing queued before it can set it. Delivering it
    /// would change nothing, and leaving it out keeps such runs from
    /// counting as distinct states.
    fn send(&mut self, config: &Config, client: usize, to: impl Iterator<Item = usize>, request: Request) {
        for node in to {
            let link = State::link(config, client, node);
            if let Request::Release { token } = request
                && config.release_checks_token
                && self.nodes[node].key.is_none_or(|key| key.token != token)
                && !self.to_node[link]
                    .iter()
                    .any(|sent| matches!(sent.request, Request::Acquire { .. } | Request::Renew { .. }))
            {
                continue;
            }
            self.to_node[link].push(Sent {
                at: self.now,
                request,
            });
        }
    }

    /// `attempt` (`backend/redlock/attempt.rs`): a new token, the start time taken
    /// before the first request, the acquire sent to every node at once.
    pub fn start_attempt(&mut self, config: &Config, client: usize) {
        let c = &mut self.clients[client];
        let token = config.token(client, config.attempts - c.attempts_left);
        c.attempts_left -= 1;
        c.phase = Phase::Acquiring {
            token,
            start: self.now,
            granted: 0,
            refused: 0,
            floor: 0,
            accepted: 0,
        };
        let guess = if config.fencing == Fencing::Majority {
            fence_guess(self.now)
        } else {
            0
        };
        self.send(config, client, 0..config.nodes, Request::Acquire { token, guess });
    }

    /// A failed attempt: the release goes to every node in `to`, queued
    /// behind the acquire on nodes that have not answered.
    fn fail(&mut self, config: &Config, client: usize, token: u8, to: Nodes) {
        let to = (0..config.nodes).filter(|&n| to & (1 << n) != 0);
        self.send(config, client, to, Request::Release { token });
        self.clients[client].phase = Phase::Idle;
        self.ghost.ended |= bit(token);
    }

    /// Where a failed first phase sends its release: every node that did not
    /// refuse (`release_all` skipping `refused_by`), or in the negative
    /// control only those that granted.
    fn undo_set(config: &Config, granted: Nodes, refused: Nodes) -> Nodes {
        if config.undo_unanswered {
            all(config) & !refused
        } else {
            granted
        }
    }

    /// The end of a hold (released, or lost): the release goes to every
    /// node (`release_all`, `release_in_background`).
    fn end_hold(&mut self, config: &Config, client: usize, token: u8) {
        self.send(config, client, 0..config.nodes, Request::Release { token });
        self.clients[client].phase = Phase::Idle;
        self.ghost.ended |= bit(token);
    }

    /// An attempt dropped by its caller: `Undo` in `backend/redlock/attempt.rs`
    /// releases on every node.
    pub fn cancel(&mut self, config: &Config, client: usize) {
        if let Phase::Acquiring { token, .. } | Phase::Fencing { token, .. } = self.clients[client].phase {
            self.fail(config, client, token, all(config));
        }
    }

    /// `Guard::release`.
    pub fn release(&mut self, config: &Config, client: usize) {
        if let Phase::Holding { token, .. } = self.clients[client].phase {
            self.end_hold(config, client, token);
        }
    }

    /// The lock is taken with `valid_until = start + life - drift`
    /// (`Attempt::finish`), if that is still ahead (`quorum::validity` is
    /// positive); otherwise the attempt fails (`ValidityUsedUp`).
    fn hold(&mut self, config: &Config, client: usize, token: u8, (start, life): (u8, u8), fence: u8) {
        let valid_until = start + life - config.drift;
        if self.now >= valid_until {
            self.fail(config, client, token, all(config));
            return;
        }
        self.ghost.holds = if config.writes {
            self.ghost.holds + 1
        } else {
            (self.ghost.holds + 1).min(2)
        };
        self.clients[client].phase = Phase::Holding {
            token,
            valid_until,
            fence,
            seq: self.ghost.holds,
            renewals: 0,
            renewal: None,
            wrote: false,
        };
    }

    /// Records a fencing token handed to a holder, for the fencing property:
    /// it must be above every token handed out before it, so that tokens
    /// grow in the order the holders took the lock.
    fn issue(&mut self, value: u8) {
        assert!(
            value < 128,
            "fencing token {value} is past the ghost's 128-bit set: lower the horizon"
        );
        let bit = 1u128 << value;
        self.ghost.duplicate |= self.ghost.issued & bit != 0;
        self.ghost.not_above_earlier |= value <= self.ghost.highest_issued;
        self.ghost.issued |= bit;
        self.ghost.highest_issued = self.ghost.highest_issued.max(value);
    }

    /// Phase 1 decided with a majority of grants: plain, the lock is held;
    /// fenced, the token proposed with the acquire when a majority of the
    /// granting nodes took it, else `fence::propose` sends `floor + 1` to
    /// every node; the naive scheme takes the largest `INCR` reply as the
    /// token.
    fn granted(&mut self, config: &Config, client: usize) {
        let Phase::Acquiring {
            token,
            start,
            granted,
            floor,
            accepted,
            ..
        } = self.clients[client].phase
        else {
            return;
        };
        let life = life(config, self.rogue(), granted);
        match config.fencing {
            Fencing::Off => self.hold(config, client, token, (start, life), 0),
            Fencing::NaiveIncr => {
                self.issue(floor);
                self.hold(config, client, token, (start, life), floor);
            }
            Fencing::Majority if count(accepted) >= config.quorum() => {
                let guess = fence_guess(start);
                if self.now < start + life - config.drift {
                    self.issue(guess);
                }
                self.hold(config, client, token, (start, life), guess);
            }
            Fencing::Majority => self.propose(config, client, token, start, floor + 1, 1),
        }
    }

    /// One round of `fence::propose`.
    fn propose(&mut self, config: &Config, client: usize, token: u8, start: u8, value: u8, round: u8) {
        self.clients[client].phase = Phase::Fencing {
            token,
            start,
            value,
            round,
            round_start: self.now,
            accepted: 0,
            rejected: 0,
            highest: 0,
        };
        self.send(config, client, 0..config.nodes, Request::Propose { token, value });
    }

    /// A reply reaches `client`; replies of an attempt or round that is over
    /// are dropped, as the library stops counting at its decision.
    pub fn receive(&mut self, config: &Config, client: usize, node: usize, reply: Reply) {
        match reply {
            Reply::Acquire {
                token,
                granted,
                fence,
                accepted,
            } => self.on_acquire(config, client, node, token, (granted, accepted), fence),
            Reply::Propose {
                token,
                value,
                accepted,
                highest,
            } => self.on_propose(config, client, node, (token, value), accepted, highest),
            Reply::Renew { token, round, status } => {
                self.on_renew(config, client, node, (token, round), status)
            }
        }
    }

    /// Phase 1 counts a grant or a refusal (`acquire_everywhere`), and
    /// decides as soon as the outcome is certain (`Until::Decided`).
    fn on_acquire(
        &mut self,
        config: &Config,
        client: usize,
        node: usize,
        reply_token: u8,
        (g, a): (bool, bool),
        fence: u8,
    ) {
        let Phase::Acquiring {
            token,
            granted,
            refused,
            floor,
            accepted,
            ..
        } = &mut self.clients[client].phase
        else {
            return;
        };
        if *token != reply_token {
            return;
        }
        if g {
            *granted |= 1 << node;
            if a {
                *accepted |= 1 << node;
            }
        } else {
            *refused |= 1 << node;
        }
        // A refusing node's fence counts too: it is that node's floor
        // (`acquire_everywhere` keeps the highest of all replies). The naive
        // scheme's token is the largest count of a granting node.
        if g || config.fencing == Fencing::Majority {
            *floor = (*floor).max(fence);
        }
        let (token, granted, refused) = (*token, *granted, *refused);
        if count(granted) >= config.quorum() {
            self.granted(config, client);
        } else if count(refused) > config.nodes - config.quorum() {
            self.fail(config, client, token, State::undo_set(config, granted, refused));
        }
    }

    /// Phase 2 counts an acceptance or a rejection of the value proposed
    /// (`fence::propose`): the token once a majority accepted within the
    /// validity, a new round above the highest reply after a majority of
    /// rejections, failure when rounds or validity run out.
    fn on_propose(&mut self, config: &Config, client: usize, node: usize, of: (u8, u8), a: bool, h: u8) {
        let Phase::Fencing {
            token,
            start,
            value,
            round,
            accepted,
            rejected,
            highest,
            ..
        } = &mut self.clients[client].phase
        else {
            return;
        };
        if (*token, *value) != of {
            return;
        }
        if a {
            *accepted |= 1 << node;
        } else {
            *rejected |= 1 << node;
        }
        *highest = (*highest).max(h);
        let (token, start, value, round, accepted, rejected, highest) =
            (*token, *start, *value, *round, *accepted, *rejected, *highest);
        let valid_until = start + TTL - config.drift;
        if count(accepted) >= config.quorum() {
            if self.now < valid_until {
                self.issue(value);
            }
            // Fenced configurations keep every clock within the allowance.
            self.hold(config, client, token, (start, TTL), value);
        } else if count(rejected) > config.nodes - config.quorum() {
            if round < FENCE_ROUNDS && self.now < valid_until {
                let next = value.max(highest) + 1;
                self.propose(config, client, token, start, next, round + 1);
            } else {
                self.fail(config, client, token, all(config));
            }
        }
    }

    /// A renewal round counts one node's status (`lock::renewal::renew` and
    /// `apply`).
    fn on_renew(&mut self, config: &Config, client: usize, node: usize, of: (u8, u8), status: Renewed) {
        let (now, rogue) = (self.now, self.rogue());
        let Phase::Holding {
            token,
            valid_until,
            renewal: Some(r),
            ..
        } = &mut self.clients[client].phase
        else {
            return;
        };
        if (*token, r.start) != of {
            return;
        }
        match status {
            Renewed::Extended | Renewed::Healed => r.confirmed |= 1 << node,
            Renewed::Foreign => r.foreign |= 1 << node,
            Renewed::Missing => {}
        }
        let (token, round) = (*token, *r);
        if count(round.confirmed) >= config.renew_quorum() {
            // `Held::confirm`: only while the validity has not passed; the
            // new validity runs from the round's start, for as long as the
            // confirming nodes keep the keys, and must still be ahead.
            let renewed_until = round.start + life(config, rogue, round.confirmed) - config.drift;
            if now < *valid_until && now < renewed_until {
                *valid_until = renewed_until;
                self.end_renewal(client);
                self.ghost.renewed = true;
            } else {
                self.lose(config, client, token);
            }
        } else if count(round.foreign) > config.nodes - config.quorum() {
            // `lock::renewal::apply`: a majority holds another token.
            self.lose(config, client, token);
        }
    }

    /// The loss (`lock::renewal::lose`, or the local timer in `Held::lost`): the
    /// holder is told once, and the release goes to every node.
    fn lose(&mut self, config: &Config, client: usize, token: u8) {
        self.ghost.lost = true;
        self.end_hold(config, client, token);
    }

    /// A holder's renewal round is over (decided, or past its deadline).
    fn end_renewal(&mut self, client: usize) {
        if let Phase::Holding { renewal, .. } = &mut self.clients[client].phase {
            *renewal = None;
        }
    }

    /// The watchdog starts a renewal round (`lock::renewal::renew`): one `RENEW`
    /// per node, the new validity to run from now.
    pub fn start_renewal(&mut self, config: &Config, client: usize) {
        let now = self.now;
        if let Phase::Holding {
            token,
            renewals,
            renewal,
            ..
        } = &mut self.clients[client].phase
        {
            *renewals += 1;
            *renewal = Some(Round {
                start: now,
                confirmed: 0,
                foreign: 0,
            });
            let token = *token;
            self.send(
                config,
                client,
                0..config.nodes,
                Request::Renew { token, round: now },
            );
        }
    }

    /// A holder that believes it holds the lock sends its one write.
    pub fn write(&mut self, client: usize) {
        if let Phase::Holding {
            fence, seq, wrote, ..
        } = &mut self.clients[client].phase
        {
            *wrote = true;
            self.to_resource[client] = Some(Write {
                fence: *fence,
                seq: *seq,
            });
        }
    }

    /// The resource takes a write: fenced, only at or above the highest
    /// token it has seen (`FENCED_WRITE`, `token < seen` refused).
    pub fn apply_write(&mut self, config: &Config, client: usize) {
        let Some(write) = self.to_resource[client].take() else {
            return;
        };
        if config.fencing != Fencing::Off && write.fence < self.resource_seen {
            self.ghost.write_refused = true;
            return;
        }
        self.resource_seen = self.resource_seen.max(write.fence);
        self.ghost.write_out_of_order |= write.seq < self.ghost.last_write;
        self.ghost.last_write = self.ghost.last_write.max(write.seq);
    }

    /// What a client's timers do when the clock reaches `now`: an attempt,
    /// a proposal round or a renewal round stops counting at its deadline
    /// (the per-node timeout, and for a proposal or renewal the validity),
    /// and the local timer fires the loss at `valid_until`.
    pub fn client_timers(&mut self, config: &Config, client: usize) {
        let now = self.now;
        match self.clients[client].phase {
            Phase::Acquiring {
                token,
                start,
                granted,
                refused,
                ..
            } if now >= start + TIMEOUT => {
                self.fail(config, client, token, State::undo_set(config, granted, refused))
            }
            Phase::Fencing {
                token,
                start,
                round_start,
                ..
            } if now >= (round_start + TIMEOUT).min(start + TTL - config.drift) => {
                self.fail(config, client, token, all(config))
            }
            Phase::Holding {
                token, valid_until, ..
            } if now >= valid_until => self.lose(config, client, token),
            Phase::Holding {
                valid_until,
                renewal: Some(r),
                ..
            } if now >= (r.start + TIMEOUT).min(valid_until) => self.end_renewal(client),
            _ => {}
        }
    }
}
