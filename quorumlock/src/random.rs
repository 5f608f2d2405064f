//! Randomness: lock tokens and retry jitter, one home each.

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
    if let Err(error) = SysRng.try_fill_bytes(&mut bytes) {
        tracing::warn!(%error, "the system random generator failed; using the thread-local one");
        bytes = rand::random();
    }
    hex(&bytes)
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
    (base / 2).saturating_add(base.mul_f64(rand::random::<f64>()))
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
