//! A node's keys: strings and sorted sets, each with an optional absolute
//! expiry on the node's clock, expired lazily as Redis does on access.
//!
//! Ordered maps throughout: anything a reply or a check lists comes out in
//! the same order on every run.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// What a key holds.
#[derive(Clone, Debug)]
pub enum Data {
    /// A string.
    Str(Vec<u8>),
    /// A sorted set.
    ZSet(ZSet),
}

impl Data {
    /// The name `TYPE` gives it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Data::Str(_) => "string",
            Data::ZSet(_) => "zset",
        }
    }
}

/// A key's value and its expiry (unix ms on the node's clock).
#[derive(Clone, Debug)]
pub struct Entry {
    /// The value.
    pub data: Data,
    /// When it expires; `None`: never.
    pub expires_at: Option<i64>,
}

/// One database of a node.
#[derive(Clone, Debug, Default)]
pub struct Keyspace {
    keys: BTreeMap<Vec<u8>, Entry>,
}

impl Keyspace {
    /// Drops `key` if it expired by `now` (Redis: expired once the clock
    /// is past the expiry), so that every later look sees it gone.
    fn expire_if_due(&mut self, key: &[u8], now: i64) {
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|at| now > at))
        {
            self.keys.remove(key);
        }
    }

    /// The live entry of `key`.
    pub fn get(&mut self, key: &[u8], now: i64) -> Option<&Entry> {
        self.expire_if_due(key, now);
        self.keys.get(key)
    }

    /// The live entry of `key`, to change.
    pub fn get_mut(&mut self, key: &[u8], now: i64) -> Option<&mut Entry> {
        self.expire_if_due(key, now);
        self.keys.get_mut(key)
    }

    /// Sets `key`, replacing what it held.
    pub fn insert(&mut self, key: &[u8], entry: Entry) {
        self.keys.insert(key.to_vec(), entry);
    }

    /// Deletes `key`; whether a live key was there.
    pub fn remove(&mut self, key: &[u8], now: i64) -> bool {
        self.expire_if_due(key, now);
        self.keys.remove(key).is_some()
    }

    /// Every live key and its entry, in key order.
    pub fn live(&self, now: i64) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.keys
            .iter()
            .filter(move |(_, e)| e.expires_at.is_none_or(|at| now <= at))
    }

    /// Drops every expired key (Redis' active expiry, done in one sweep).
    pub fn sweep(&mut self, now: i64) {
        self.keys.retain(|_, e| e.expires_at.is_none_or(|at| now <= at));
    }

    /// Deletes everything.
    pub fn clear(&mut self) {
        self.keys.clear();
    }
}

/// A score: a double that is never NaN, ordered totally.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        // -0.0 and 0.0 are one score to Redis.
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

/// A sorted set: members ordered by score, then by their bytes.
#[derive(Clone, Debug, Default)]
pub struct ZSet {
    scores: BTreeMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl ZSet {
    /// How many members.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// Whether it has no members (Redis deletes such a key).
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// Sets `member`'s score.
    pub fn insert(&mut self, member: &[u8], score: f64) {
        if let Some(old) = self.scores.insert(member.to_vec(), score) {
            self.order.remove(&(Score(old), member.to_vec()));
        }
        self.order.insert((Score(score), member.to_vec()));
    }

    /// Removes `member`; whether it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(old) => self.order.remove(&(Score(old), member.to_vec())),
            None => false,
        }
    }

    /// Members and scores from rank `start` to `stop` inclusive (both
    /// already within bounds).
    pub fn range(&self, start: usize, stop: usize) -> Vec<(Vec<u8>, f64)> {
        self.order
            .iter()
            .skip(start)
            .take(stop + 1 - start)
            .map(|(score, member)| (member.clone(), score.0))
            .collect()
    }
}

/// Whether `text` matches the glob `pattern` (`*`, `?`, `[...]` with `^`
/// and ranges, `\` escapes), as `KEYS` and `PSUBSCRIBE` match.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| glob_match(rest, &text[skip..])),
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((b'[', rest)) => match text.split_first() {
            Some((&c, text_rest)) => {
                let (matched, after) = class_match(rest, c);
                matched && glob_match(after, text_rest)
            }
            None => false,
        },
        Some((b'\\', rest)) if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && glob_match(&rest[1..], &text[1..])
        }
        Some((&p, rest)) => text.first() == Some(&p) && glob_match(rest, &text[1..]),
    }
}

/// Matches `c` against the class after a `[`: whether it matched, and the
/// pattern after the closing `]`.
fn class_match(mut pattern: &[u8], c: u8) -> (bool, &[u8]) {
    let negate = pattern.first() == Some(&b'^');
    if negate {
        pattern = &pattern[1..];
    }
    let mut matched = false;
    loop {
        match pattern {
            [] => break,
            [b']', rest @ ..] => {
                pattern = rest;
                break;
            }
            [b'\\', e, rest @ ..] => {
                matched |= *e == c;
                pattern = rest;
            }
            [a, b'-', b, rest @ ..] if *b != b']' => {
                let (lo, hi) = if a <= b { (*a, *b) } else { (*b, *a) };
                matched |= (lo..=hi).contains(&c);
                pattern = rest;
            }
            [a, rest @ ..] => {
                matched |= *a == c;
                pattern = rest;
            }
        }
    }
    (matched != negate, pattern)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_keys_does() {
        assert!(glob_match(b"*", b"anything"));
        assert!(glob_match(b"k?", b"k1"));
        assert!(!glob_match(b"k?", b"k12"));
        assert!(glob_match(b"k[0-9]x", b"k5x"));
        assert!(!glob_match(b"k[^0-9]", b"k5"));
        assert!(glob_match(b"a\\*", b"a*"));
    }

    #[test]
    fn expired_keys_vanish_on_access() {
        let mut keys = Keyspace::default();
        let entry = Entry {
            data: Data::Str(b"v".to_vec()),
            expires_at: Some(100),
        };
        keys.insert(b"k", entry);
        assert!(keys.get(b"k", 100).is_some(), "live up to its expiry");
        assert!(keys.get(b"k", 101).is_none());
        assert_eq!(keys.live(0).count(), 0, "removed for good");
    }
}
