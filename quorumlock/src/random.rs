//! Randomness: lock tokens, retry jitter and every other draw of the
//! library, in one place, so that a simulation can draw them all from its
//! seed (the `sim` feature).

use std::time::Duration;

use rand::TryRng;
use rand::rngs::SysRng;

/// A fresh 128-bit token, as 32 hex digits: a lock's value, an idempotency
/// marker.
///
/// Drawn from the operating system's generator on every call, not from a
/// thread-local one: a process that forks (a prefork server, a worker pool
/// started after the client) copies a thread-local generator's state into
/// every child, and the children would then draw the same tokens, which
/// would let one release another's lock. Should the system generator fail,
/// the thread-local generator (itself seeded from the system) is used, and
/// the failure logged.
pub(crate) fn token() -> String {
    let mut bytes = [0u8; 16];
    if simulated(&mut bytes) {
        return hex(&bytes);
    }
    if let Err(error) = SysRng.try_fill_bytes(&mut bytes) {
        tracing::warn!(%error, "the system random generator failed; using the thread-local one");
        bytes = rand::random();
    }
    hex(&bytes)
}

/// Draws from the simulation this thread is in, if any (see `crate::sim`).
fn simulated(bytes: &mut [u8]) -> bool {
    #[cfg(feature = "sim")]
    return crate::sim::fill(bytes);
    #[cfg(not(feature = "sim"))]
    {
        let _ = bytes;
        false
    }
}

/// A uniformly drawn `u64`, for ids that need not be secret (a waiter's
/// mailbox, a queue entry's tie-breaker).
pub(crate) fn u64() -> u64 {
    let mut bytes = [0u8; 8];
    if simulated(&mut bytes) {
        return u64::from_le_bytes(bytes);
    }
    rand::random()
}

/// A uniform draw from `[0, 1)`.
pub(crate) fn fraction() -> f64 {
    // The top 53 bits: every double in [0, 1) with that spacing, equally likely.
    const MANTISSA: u32 = 53;
    (u64() >> (64 - MANTISSA)) as f64 / (1u64 << MANTISSA) as f64
}

/// A uniform draw from `[0, n)`; 0 for `n` = 0.
pub(crate) fn below(n: usize) -> usize {
    // `fraction() * n` rounds down to below `n`: the product of a value
    // below 1 by `n` (at most 2^53 here) is below `n` in floating point too.
    (fraction() * n as f64) as usize
}

/// `bytes` as lowercase hex digits: a token's text, written directly (the
/// formatting machinery costs more than the rest of a token).
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

/// A delay uniformly spread over `[base / 2, base * 3 / 2)`, so that
/// clients that collided do not collide again in lock step. Saturates
/// instead of overflowing for absurd bases.
pub(crate) fn jitter(base: Duration) -> Duration {
    (base / 2).saturating_add(base.mul_f64(fraction()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_writes_every_byte_as_two_lowercase_digits() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        let bytes: [u8; 16] = rand::random();
        assert_eq!(hex(&bytes), format!("{:032x}", u128::from_be_bytes(bytes)));
    }

    #[test]
    fn draws_stay_in_their_ranges() {
        for _ in 0..10_000 {
            assert!((0.0..1.0).contains(&fraction()));
            assert!(below(3) < 3);
        }
        assert_eq!(below(0), 0);
        assert_eq!(below(1), 0);
    }

    #[test]
    fn tokens_are_128_bit_hex_and_fresh() {
        let tokens: std::collections::HashSet<String> = (0..1000).map(|_| token()).collect();
        assert_eq!(tokens.len(), 1000);
        assert!(
            tokens
                .iter()
                .all(|t| t.len() == 32 && t.bytes().all(|b| b.is_ascii_hexdigit()))
        );
    }
}
