//! Forming a cluster without `redis-cli --cluster create`, which refuses
//! fewer than three primaries: each primary is given its share of the slots
//! (`CLUSTER ADDSLOTSRANGE`) and a config epoch of its own, the first node
//! meets the others (`CLUSTER MEET`), and each replica follows its primary
//! (`CLUSTER REPLICATE`) once gossip has told it about that primary.

use std::io;

use super::parts::admin;
use super::{CLUSTER_SLOTS, HEALTHY_TIMEOUT, RedisCluster};
use crate::members::poll;

impl RedisCluster {
    /// Forms the cluster from its started nodes: nodes `0..primaries` serve
    /// the slots in equal ranges, in order; the next `replicas` nodes
    /// replicate primary 0, the next ones primary 1, and so on.
    pub(super) fn form_by_hand(&self, replicas: usize) -> io::Result<()> {
        let ports = self.ports();
        for (i, &port) in ports.iter().enumerate() {
            // Distinct epochs from the start, as `--cluster create` gives
            // them: no epoch collision to resolve before the slots settle.
            admin(port, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]);
        }
        for (i, (first, last)) in slot_ranges(self.primaries).into_iter().enumerate() {
            let (first, last) = (first.to_string(), last.to_string());
            admin(ports[i], &["CLUSTER", "ADDSLOTSRANGE", &first, &last]);
        }
        for &port in &ports[1..] {
            admin(ports[0], &["CLUSTER", "MEET", "127.0.0.1", &port.to_string()]);
        }
        for i in self.primaries..ports.len() {
            let primary = (i - self.primaries) / replicas;
            let id = self.node_id(primary);
            // Past the handshake: until then the node knows the primary's
            // address under a made-up id, and REPLICATE of the real id fails.
            let known = poll(HEALTHY_TIMEOUT, || {
                let view = self.view(i)?;
                view.iter()
                    .any(|l| l.port == ports[primary] && l.has("master") && !l.has("handshake"))
                    .then_some(())
            });
            if known.is_none() {
                return Err(io::Error::other(format!(
                    "node {i} never learned of primary {primary}\n{}",
                    self.logs()
                )));
            }
            admin(ports[i], &["CLUSTER", "REPLICATE", &id]);
        }
        Ok(())
    }
}

/// `primaries` inclusive ranges covering all slots in order, as equal as
/// they can be (the first ones one slot longer when it does not divide).
pub(super) fn slot_ranges(primaries: usize) -> Vec<(u16, u16)> {
    let (slots, n) = (usize::from(CLUSTER_SLOTS), primaries);
    (0..n)
        .map(|i| {
            let first = i * (slots / n) + i.min(slots % n);
            let len = slots / n + usize::from(i < slots % n);
            (first as u16, (first + len - 1) as u16)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::slot_ranges;

    #[test]
    fn ranges_cover_every_slot_once() {
        assert_eq!(slot_ranges(1), [(0, 16383)]);
        assert_eq!(slot_ranges(2), [(0, 8191), (8192, 16383)]);
        assert_eq!(slot_ranges(3), [(0, 5461), (5462, 10922), (10923, 16383)]);
    }
}
