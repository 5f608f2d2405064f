//! What a simulated client does: locks, fenced and plain, one resource or
//! two, at once or waiting in the hand-off queue, held across renewals for
//! many ttls, released or dropped; every grant and every step of work under
//! it recorded in the [`History`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::{Error, Guard, LockOptions, Redlock};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use crate::history::{History, Hold};
use crate::outages::Outage;

/// The resources the clients contend for: few, so that they collide often.
pub const RESOURCES: [&str; 3] = ["res:a", "res:b", "res:c"];

/// The ttls locks are taken with, from shorter than a few round trips under
/// load to several seconds, so that renewals run at many paces.
const TTLS_MS: [u64; 5] = [60, 150, 400, 1_000, 3_000];

/// The longest a step of work under a lock lasts.
const STEP_MAX_MS: u64 = 20;

/// How the clients take locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Every kind of lock, at random (see the module docs).
    Mixed,
    /// One resource, a long ttl without renewal, held in 1 ms steps to the
    /// very end of its validity, while the others wait retrying every few
    /// ms: what shows a validity that trusts a key longer than the nodes
    /// keep it.
    Expiry,
}

/// The ttl of an [`Style::Expiry`] lock.
const EXPIRY_TTL: Duration = Duration::from_secs(3);

/// How often an [`Style::Expiry`] waiter tries (jittered by half).
const EXPIRY_RETRY: Duration = Duration::from_millis(3);

/// What one client does until `end`.
pub struct Client {
    pub id: usize,
    pub redlock: Redlock,
    pub rng: StdRng,
    pub history: Arc<Mutex<History>>,
    pub end: Instant,
    pub style: Style,
}

impl Client {
    pub fn new(
        id: usize,
        redlock: Redlock,
        seed: u64,
        history: Arc<Mutex<History>>,
        (end, style): (Instant, Style),
    ) -> Self {
        Client {
            id,
            redlock,
            rng: StdRng::seed_from_u64(seed),
            history,
            end,
            style,
        }
    }

    /// Takes and gives back locks until the run's end.
    pub async fn run(mut self) -> Redlock {
        while Instant::now() < self.end {
            self.one_lock().await;
            let pause = self.rng.random_range(0..30);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        self.redlock
    }

    fn now(&self) -> Duration {
        self.history.lock().unwrap_or_else(|e| e.into_inner()).now()
    }

    async fn one_lock(&mut self) {
        if self.style == Style::Expiry {
            let resources = vec![RESOURCES[0].to_owned()];
            let options = LockOptions::new()
                .auto_renew(false)
                .wait(EXPIRY_TTL * 2)
                .retry_delay(EXPIRY_RETRY);
            return self.lock_with(options, resources, EXPIRY_TTL).await;
        }
        let resources = self.resources();
        let ttl = Duration::from_millis(TTLS_MS[self.rng.random_range(0..TTLS_MS.len())]);
        let mut options = LockOptions::new()
            .fenced(self.rng.random_bool(0.3))
            .auto_renew(self.rng.random_bool(0.7));
        let waits = self.rng.random_bool(0.6);
        options = if waits {
            options.wait(Duration::from_millis(self.rng.random_range(10..1_500)))
        } else {
            options.max_attempts(1)
        };
        self.lock_with(options, resources, ttl).await;
    }

    /// Takes the lock with `options` and works under it.
    async fn lock_with(&mut self, options: LockOptions, resources: Vec<String>, ttl: Duration) {
        let asked = self.now();
        let client = match self.redlock.with_options(options) {
            Ok(client) => client,
            Err(error) => return self.record_error(&error, asked),
        };
        match client.lock(resources.clone(), ttl).await {
            Ok(guard) => self.work(guard, resources, asked, ttl).await,
            Err(error) => self.record_error(&error, asked),
        }
    }

    /// One resource mostly, sometimes two (all-or-nothing on each node).
    fn resources(&mut self) -> Vec<String> {
        let first = self.rng.random_range(0..RESOURCES.len());
        let mut resources = vec![RESOURCES[first].to_owned()];
        if self.rng.random_bool(0.15) {
            resources.push(RESOURCES[(first + 1) % RESOURCES.len()].to_owned());
        }
        resources
    }

    /// Works under `guard` in steps for a planned time (up to a few ttls,
    /// so that renewals run), each step only while the guard says the lock
    /// covers it; then releases or drops the guard.
    async fn work(&mut self, guard: Guard, resources: Vec<String>, asked: Duration, ttl: Duration) {
        let granted = self.now();
        let hold = self.history.lock().unwrap_or_else(|e| e.into_inner()).hold(Hold {
            client: self.id,
            resources,
            token: guard.token().to_owned(),
            fence: guard.fence_token(),
            asked,
            granted,
            given_back: None,
        });
        let planned = match self.style {
            Style::Mixed => ttl.mul_f64(self.rng.random_range(0.0..3.0)),
            Style::Expiry => ttl * 2,
        };
        let until = Instant::now() + planned;
        while Instant::now() < until {
            let step = match self.style {
                Style::Mixed => Duration::from_millis(self.rng.random_range(1..=STEP_MAX_MS)),
                Style::Expiry => Duration::from_millis(1),
            };
            if !guard.is_held() || guard.remaining() < step {
                break;
            }
            let start = self.now();
            tokio::time::sleep(step).await;
            self.history
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .step(hold, start, start + step);
        }
        if self.rng.random_bool(0.85) {
            let asked = self.now();
            if let Err(error) = guard.release().await {
                self.record_error(&error, asked);
            }
        } else {
            drop(guard);
        }
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .given_back(hold);
    }

    /// Records an operation asked for at `asked` that failed with `error`.
    fn record_error(&self, error: &Error, asked: Duration) {
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        let now = history.now();
        if let Some(outage) = Outage::of(error, self.id, asked, now) {
            history.outages.push(outage);
        }
        match error {
            Error::Held { .. } => history.refused += 1,
            other => history.error(kind(other)),
        }
    }
}

/// An error's variant, as the run's statistics count it.
fn kind(error: &Error) -> String {
    let text = format!("{error:?}");
    text.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_owned()
}
