//! What a simulated client does: locks, fenced and plain, one resource or
//! two, at once or waiting in the hand-off queue, and permits of a
//! semaphore, held across renewals for many ttls, released or dropped;
//! every grant and every step of work under it recorded in the
//! [`History`] (a permit as a hold of its own key: one holder at a time).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::{Error, Guard, LockOptions, Permit, Redlock, ReleaseReport};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use crate::history::{History, Hold};
use crate::outages::Outage;

/// The resources the clients contend for: few, so that they collide often.
pub const RESOURCES: [&str; 3] = ["res:a", "res:b", "res:c"];

/// The semaphore the clients take permits of, and its permits: fewer than
/// the clients, so that they wait for one another.
pub const POOL: &str = "pool";
pub const POOL_PERMITS: usize = 2;

/// The share of the [`Style::Mixed`] operations that take a permit.
const PERMIT_SHARE: f64 = 0.2;

/// Every key a lock or permit of the workload is held by, on a node: what
/// the checks of left-behind keys read (a permit's key is
/// `{name}:permit:<index>`, as `Semaphore::permit_name` documents).
pub fn lock_keys() -> Vec<String> {
    let permits = (0..POOL_PERMITS).map(|i| format!("{{{POOL}}}:permit:{i}"));
    RESOURCES.iter().map(|r| (*r).to_owned()).chain(permits).collect()
}

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
        let ttl = Duration::from_millis(TTLS_MS[self.rng.random_range(0..TTLS_MS.len())]);
        if self.rng.random_bool(PERMIT_SHARE) {
            return self.permit(ttl).await;
        }
        let resources = self.resources();
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
            Ok(guard) => self.work(Held::Lock(guard), resources, asked, ttl).await,
            Err(error) => self.record_error(&error, asked),
        }
    }

    /// Takes a permit of the [`POOL`], waiting in its queue or with one
    /// sweep, and works under it.
    async fn permit(&mut self, ttl: Duration) {
        let options = if self.rng.random_bool(0.6) {
            LockOptions::new().wait(Duration::from_millis(self.rng.random_range(10..1_500)))
        } else {
            LockOptions::new().max_attempts(1)
        };
        let asked = self.now();
        let pool = match self.redlock.with_options(options) {
            Ok(client) => client.semaphore(POOL, POOL_PERMITS),
            Err(error) => Err(error),
        };
        let pool = match pool {
            Ok(pool) => pool,
            Err(error) => return self.record_error(&error, asked),
        };
        match pool.acquire(ttl).await {
            Ok(permit) => {
                let key = pool.permit_name(permit.index()).to_owned();
                self.work(Held::Permit(permit), vec![key], asked, ttl).await;
            }
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
    async fn work(&mut self, guard: Held, resources: Vec<String>, asked: Duration, ttl: Duration) {
        let granted = self.now();
        let hold = self.history.lock().unwrap_or_else(|e| e.into_inner()).hold(Hold {
            client: self.id,
            resources,
            token: guard.guard().token().to_owned(),
            fence: guard.guard().fence_token(),
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
            if !guard.guard().is_held() || guard.guard().remaining() < step {
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

/// A lock or a permit, which the workload works under alike.
enum Held {
    Lock(Guard),
    Permit(Permit),
}

impl Held {
    fn guard(&self) -> &Guard {
        match self {
            Held::Lock(guard) => guard,
            Held::Permit(permit) => permit.guard(),
        }
    }

    async fn release(self) -> Result<ReleaseReport, Error> {
        match self {
            Held::Lock(guard) => guard.release().await,
            Held::Permit(permit) => permit.release().await,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_permit_keys_are_the_semaphores_own() {
        let redlock = Redlock::builder()
            .node("redis://127.0.0.1:1")
            .build()
            .expect("valid settings");
        let pool = redlock.semaphore(POOL, POOL_PERMITS).expect("a valid pool");
        let keys = lock_keys();
        for i in 0..POOL_PERMITS {
            assert!(keys.iter().any(|k| k == pool.permit_name(i)), "{keys:?}");
        }
    }
}
