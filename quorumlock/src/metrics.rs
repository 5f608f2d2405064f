//! What the library counts and times, through the `metrics` facade.
//!
//! The library records; the application chooses where the figures go by
//! installing a recorder (`metrics-exporter-prometheus`, a StatsD or an
//! OpenTelemetry bridge). Without one, every record is a call into the
//! facade's no-op recorder: no allocation on the paths a lock takes (their
//! keys are built once, see [`Keys`]), measured in docs/benchmarks.md.
//!
//! Names follow the Prometheus conventions (`_total` for counters,
//! `_seconds` for times), and every label takes a bounded set of values:
//! never a resource name or a token. docs/operations.md (Monitoring) has the
//! table of names, labels and units; a test holds it against this file.

use std::sync::OnceLock;
use std::time::Duration;

use ::metrics::{Key, Label, Level, Metadata};

use crate::error::{Error, NodeErrorKind};

/// Lock calls by outcome: counter; labels `call`, `outcome`.
pub(crate) const ACQUISITIONS: &str = "quorumlock_acquisitions_total";
/// How long one acquisition attempt took, whatever its outcome: histogram,
/// seconds; label `outcome`.
pub(crate) const ATTEMPT_SECONDS: &str = "quorumlock_attempt_duration_seconds";
/// How long a lock call took from the call to its result, waits and retries
/// included: histogram, seconds; labels `call`, `outcome`.
pub(crate) const WAIT_SECONDS: &str = "quorumlock_wait_duration_seconds";
/// How long a lock was held, from its acquisition to its release or loss:
/// histogram, seconds; label `end`.
pub(crate) const HOLD_SECONDS: &str = "quorumlock_hold_duration_seconds";
/// Renewals of held locks by outcome: counter; label `outcome`.
pub(crate) const RENEWALS: &str = "quorumlock_renewals_total";
/// Locks lost while held, by cause: counter; label `cause`.
pub(crate) const LOSSES: &str = "quorumlock_losses_total";
/// Requests a node failed, by node and kind: counter; labels `node` (its
/// URL without credentials, one value per configured node), `kind`.
pub(crate) const NODE_ERRORS: &str = "quorumlock_node_errors_total";
/// Waiters woken by a release that named them: counter.
pub(crate) const WAKEUPS: &str = "quorumlock_handoff_wakeups_total";
/// Requests per batch sent to a node: histogram.
pub(crate) const BATCH_SIZE: &str = "quorumlock_batch_size";
/// How long a batch's oldest request waited in its node's queue before the
/// batch was sent: histogram, seconds.
pub(crate) const BATCH_QUEUE_SECONDS: &str = "quorumlock_batch_queue_seconds";
/// Batches a node had in flight when one was sent, that one included:
/// histogram.
pub(crate) const BATCHES_IN_FLIGHT: &str = "quorumlock_batches_in_flight";

/// Which lock call an outcome belongs to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Call {
    /// `try_lock` and `try_with_lock`: one attempt.
    TryLock,
    /// `lock` and `with_lock`: attempts until the wait runs out.
    Lock,
}

impl Call {
    const ALL: [Call; 2] = [Call::TryLock, Call::Lock];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Call::TryLock => "try_lock",
            Call::Lock => "lock",
        }
    }
}

/// The values of the `outcome` label of a lock call or an attempt, in the
/// order of [`outcome_index`].
const OUTCOMES: [&str; 7] = [
    "acquired",
    "busy",
    "unreachable",
    "validity_used_up",
    "config",
    "closed",
    "other",
];

/// The `outcome` label of a lock call's or an attempt's result.
pub(crate) fn outcome<T>(result: &Result<T, Error>) -> &'static str {
    OUTCOMES[outcome_index(result)]
}

fn outcome_index<T>(result: &Result<T, Error>) -> usize {
    match result {
        Ok(_) => 0,
        Err(Error::Held { .. }) => 1,
        Err(Error::Unreachable { .. }) => 2,
        Err(Error::ValidityUsedUp { .. }) => 3,
        Err(Error::Config(_)) => 4,
        Err(Error::Closed) => 5,
        Err(_) => 6,
    }
}

/// How a hold ended, for [`HOLD_SECONDS`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum HoldEnd {
    /// Given back by `release` or a drop.
    Released,
    /// Lost while held.
    Lost,
}

impl HoldEnd {
    const ALL: [HoldEnd; 2] = [HoldEnd::Released, HoldEnd::Lost];

    fn label(self) -> &'static str {
        match self {
            HoldEnd::Released => "released",
            HoldEnd::Lost => "lost",
        }
    }
}

/// The keys of the records every lock makes, one per combination of label
/// values, built on first use. The facade's macros build a key whose label
/// values are chosen at run time (into a new allocation, then hashed) on
/// every record, recorder or not; these records are on every lock's path.
struct Keys {
    /// [`ACQUISITIONS`] and [`WAIT_SECONDS`], by call, then by outcome.
    calls: [[(Key, Key); OUTCOMES.len()]; Call::ALL.len()],
    /// [`ATTEMPT_SECONDS`] by outcome.
    attempts: [Key; OUTCOMES.len()],
    /// [`HOLD_SECONDS`] by end.
    holds: [Key; HoldEnd::ALL.len()],
}

impl Keys {
    fn get() -> &'static Keys {
        static KEYS: OnceLock<Keys> = OnceLock::new();
        KEYS.get_or_init(|| Keys {
            calls: std::array::from_fn(|call| {
                let call = Call::ALL[call].label();
                std::array::from_fn(|outcome| {
                    let labels = || {
                        vec![
                            Label::from_static_parts("call", call),
                            Label::from_static_parts("outcome", OUTCOMES[outcome]),
                        ]
                    };
                    (
                        Key::from_parts(ACQUISITIONS, labels()),
                        Key::from_parts(WAIT_SECONDS, labels()),
                    )
                })
            }),
            attempts: std::array::from_fn(|outcome| {
                Key::from_parts(
                    ATTEMPT_SECONDS,
                    vec![Label::from_static_parts("outcome", OUTCOMES[outcome])],
                )
            }),
            holds: std::array::from_fn(|end| {
                Key::from_parts(
                    HOLD_SECONDS,
                    vec![Label::from_static_parts("end", HoldEnd::ALL[end].label())],
                )
            }),
        })
    }

    /// The [`ACQUISITIONS`] and [`WAIT_SECONDS`] keys of `call` with the
    /// outcome of `result`.
    fn call<T>(&self, call: Call, result: &Result<T, Error>) -> &(Key, Key) {
        &self.calls[call as usize][outcome_index(result)]
    }
}

/// The metadata of the records made with [`Keys`] (the macros give the
/// others the same).
static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Records the end of a lock call that began `took` ago.
pub(crate) fn lock_call<T>(call: Call, took: Duration, result: &Result<T, Error>) {
    let (calls, waits) = Keys::get().call(call, result);
    ::metrics::with_recorder(|recorder| {
        recorder.register_counter(calls, &METADATA).increment(1);
        recorder.register_histogram(waits, &METADATA).record(took);
    });
}

/// Records one acquisition attempt that took `took`.
pub(crate) fn attempt<T>(took: Duration, result: &Result<T, Error>) {
    let key = &Keys::get().attempts[outcome_index(result)];
    ::metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA).record(took));
}

/// Records a hold of `held` that ended as `end`.
pub(crate) fn hold(held: Duration, end: HoldEnd) {
    let key = &Keys::get().holds[end as usize];
    ::metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA).record(held));
}

/// Records a renewal of one lock: confirmed by a majority, or not (the
/// watchdog tries again while the lock is valid).
pub(crate) fn renewal(confirmed: bool) {
    let outcome = if confirmed { "confirmed" } else { "unconfirmed" };
    ::metrics::counter!(RENEWALS, "outcome" => outcome).increment(1);
}

/// Why a held lock was lost, for [`LOSSES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    /// Its validity ran out before a renewal was confirmed.
    ValidityRanOut,
    /// The store says it is no longer ours: another token on a majority, a
    /// key or a lock node gone, a lease expired.
    Taken,
    /// The client shut down while it was held.
    Shutdown,
}

/// Records a lock lost after `held`, and the end of that hold.
pub(crate) fn loss(cause: Loss, held: Duration) {
    let cause = match cause {
        Loss::ValidityRanOut => "validity_ran_out",
        Loss::Taken => "taken",
        Loss::Shutdown => "shutdown",
    };
    ::metrics::counter!(LOSSES, "cause" => cause).increment(1);
    hold(held, HoldEnd::Lost);
}

/// Records a request that node `node` failed.
pub(crate) fn node_error(node: &str, kind: &NodeErrorKind) {
    let kind = match kind {
        NodeErrorKind::Timeout(_) => "timeout",
        NodeErrorKind::Redis(_) => "redis",
        NodeErrorKind::Etcd(_) => "etcd",
        NodeErrorKind::ZooKeeper(_) => "zookeeper",
        NodeErrorKind::ReplicasMissing { .. } => "replicas_missing",
        NodeErrorKind::ClockTooFast { .. } => "clock_too_fast",
    };
    ::metrics::counter!(NODE_ERRORS, "node" => node.to_owned(), "kind" => kind).increment(1);
}

/// Records a waiter woken by a release that named it.
pub(crate) fn wakeup() {
    ::metrics::counter!(WAKEUPS).increment(1);
}

/// Records a batch of `requests` sent to a node, the oldest of which
/// `waited` in the queue, making `in_flight` batches in flight.
pub(crate) fn batch(requests: usize, waited: Duration, in_flight: usize) {
    ::metrics::histogram!(BATCH_SIZE).record(requests as f64);
    ::metrics::histogram!(BATCH_QUEUE_SECONDS).record(waited);
    ::metrics::histogram!(BATCHES_IN_FLIGHT).record(in_flight as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key built once is the one for the labels it is recorded under.
    #[test]
    fn the_keys_built_once_carry_their_labels() {
        let labels = |key: &Key| {
            key.labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect::<Vec<_>>()
        };
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let keys = Keys::get();
        let busy: Result<(), Error> = Err(Error::Held {
            refused: 1,
            nodes: 1,
            errors: Vec::new(),
        });
        for call in Call::ALL {
            let (calls, waits) = keys.call(call, &busy);
            let expected = vec![pair("call", call.label()), pair("outcome", "busy")];
            assert_eq!((calls.name(), labels(calls)), (ACQUISITIONS, expected.clone()));
            assert_eq!((waits.name(), labels(waits)), (WAIT_SECONDS, expected));
        }
        let attempt = &keys.attempts[outcome_index(&Ok::<(), Error>(()))];
        assert_eq!(labels(attempt), [pair("outcome", "acquired")]);
        for end in HoldEnd::ALL {
            assert_eq!(labels(&keys.holds[end as usize]), [pair("end", end.label())]);
        }
    }

    /// docs/operations.md lists every metric, and only those.
    #[test]
    fn the_operations_table_lists_every_metric() {
        let doc = include_str!("../../docs/operations.md");
        let listed: Vec<&str> = doc
            .lines()
            .filter_map(|line| line.strip_prefix("| `quorumlock_"))
            .filter_map(|rest| rest.split('`').next())
            .collect();
        let mut names: Vec<String> = [
            ACQUISITIONS,
            WAIT_SECONDS,
            ATTEMPT_SECONDS,
            HOLD_SECONDS,
            RENEWALS,
            LOSSES,
            NODE_ERRORS,
            WAKEUPS,
            BATCH_SIZE,
            BATCH_QUEUE_SECONDS,
            BATCHES_IN_FLIGHT,
        ]
        .iter()
        .map(|name| name.trim_start_matches("quorumlock_").to_owned())
        .collect();
        let mut listed: Vec<String> = listed.iter().map(|s| (*s).to_owned()).collect();
        names.sort();
        listed.sort();
        assert_eq!(listed, names);
    }
}
