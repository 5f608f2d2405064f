//! A node running one request: each arm is the script it stands for, run
//! atomically as Redis runs a script.

use crate::config::{Config, FENCE_AHEAD, FENCE_SCALE, Fencing, Persistence, ROGUE, TTL};
use crate::state::{Key, Node, Renewed, Reply, Request};

impl Node {
    /// A running node, empty; `fast` and `rogue` as the initial state chose.
    pub fn new(fast: bool, rogue: bool) -> Node {
        Node {
            key: None,
            fence: 0,
            up: true,
            paused: false,
            down_since: 0,
            fast,
            rogue,
        }
    }

    /// When a key set or extended at `now` expires on this node's clock.
    fn expiry(&self, config: &Config, now: u8) -> u8 {
        now + TTL
            - if self.rogue {
                ROGUE
            } else if self.fast {
                config.fast
            } else {
                0
            }
    }

    /// The node's fence floor: `max(stored fence, TIME in µs)`.
    fn fence_floor(&self, now: u8) -> u8 {
        self.fence.max(now * FENCE_SCALE)
    }

    /// `SET key token NX PX ttl` / `FENCED_ACQUIRE`
    /// (quorumlock/src/backend/redlock/wire/lock.rs,
    /// quorumlock/src/backend/redlock/wire/fence.rs), which takes the
    /// proposed token where it grants, if above the floor and not too far
    /// ahead of the clock.
    fn acquire(&mut self, config: &Config, now: u8, token: u8, guess: u8) -> Reply {
        let granted = self.key.is_none();
        let mut accepted = false;
        let fence = match config.fencing {
            Fencing::Off => 0,
            Fencing::Majority => {
                let floor = self.fence_floor(now);
                accepted = granted && guess > floor && guess <= now * FENCE_SCALE + FENCE_AHEAD;
                if accepted {
                    self.fence = guess;
                }
                self.fence_floor(now)
            }
            // The broken scheme: `INCR` where granted, reply the count.
            Fencing::NaiveIncr => {
                if granted {
                    self.fence += 1;
                }
                self.fence
            }
        };
        if granted {
            self.key = Some(Key {
                token,
                expires: self.expiry(config, now),
            });
        }
        Reply::Acquire {
            token,
            granted,
            fence,
            accepted,
        }
    }

    /// Runs `request` at `now`; the reply, if the script has one.
    pub fn run(&mut self, config: &Config, now: u8, request: Request) -> Option<Reply> {
        match request {
            Request::Acquire { token, guess } => Some(self.acquire(config, now, token, guess)),
            // `RELEASE` (quorumlock/src/backend/redlock/wire/lock.rs): `DEL` only if `GET == token`.
            Request::Release { token } => {
                if self
                    .key
                    .is_some_and(|key| key.token == token || !config.release_checks_token)
                {
                    self.key = None;
                }
                None
            }
            // `RENEW` (quorumlock/src/backend/redlock/wire/lock.rs): `PEXPIRE` when ours, `SET`
            // again when missing and healing, nothing when another owner's.
            Request::Renew { token, round } => {
                let status = match self.key {
                    Some(key) if key.token == token => {
                        self.key = Some(Key {
                            token,
                            expires: self.expiry(config, now),
                        });
                        Renewed::Extended
                    }
                    Some(_) => Renewed::Foreign,
                    None if config.heal => {
                        self.key = Some(Key {
                            token,
                            expires: self.expiry(config, now),
                        });
                        Renewed::Healed
                    }
                    None => Renewed::Missing,
                };
                Some(Reply::Renew { token, round, status })
            }
            // `PROPOSE` (quorumlock/src/backend/redlock/wire/fence.rs): accept only above the
            // stored fence, and only while the key is the proposer's.
            Request::Propose { token, value } => {
                let accepted = self.key.is_some_and(|key| key.token == token) && self.fence < value;
                if accepted {
                    self.fence = value;
                }
                Some(Reply::Propose {
                    token,
                    value,
                    accepted,
                    highest: self.fence,
                })
            }
        }
    }

    /// Keys expire on the node's clock: gone from the tick they expire.
    pub fn expire(&mut self, now: u8) {
        if self.key.is_some_and(|key| key.expires <= now) {
            self.key = None;
        }
    }

    /// Crashes: what is not persisted is gone.
    pub fn crash(&mut self, config: &Config, now: u8) {
        self.up = false;
        // A stopped process that is killed comes back running.
        self.paused = false;
        self.down_since = now;
        if config.persistence != Persistence::Aof {
            self.key = None;
            self.fence = 0;
        }
    }

    /// Whether the node may start again at `now`: a restart takes at least a
    /// tick, and without persistence the rule asks for a ttl.
    pub fn may_restart(&self, config: &Config, now: u8) -> bool {
        let wait = match config.persistence {
            Persistence::Aof | Persistence::NoneImmediate => 1,
            Persistence::NoneDelayed => TTL,
        };
        !self.up && now >= self.down_since + wait
    }
}
