//! What the network records of itself: counts, and a running hash of
//! every event, so that two runs of one seed can be compared.

/// A running FNV-1a 64 hash: fixed, so two runs of one seed compare equal.
pub(super) struct Fnv(u64);

impl Fnv {
    pub(super) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(super) fn value(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub(super) fn u64(&mut self, value: u64) {
        self.write(&value.to_le_bytes());
    }

    pub(super) fn str(&mut self, value: &str) {
        // The length first, so that ("ab", "c") and ("a", "bc") differ.
        self.u64(value.len() as u64);
        self.write(value.as_bytes());
    }
}

/// Counters of what the network carried, for reports and replay checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceStats {
    /// Segments written (a FIN counts as one).
    pub segments: u64,
    /// Payload bytes written.
    pub bytes: u64,
    /// Running hash of every network event with its simulated time.
    pub hash: u64,
}
