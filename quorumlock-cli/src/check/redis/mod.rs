//! The checks of Redis nodes: a node's latency, version, role, persistence
//! and clock ([`node`]), its permissions ([`access`]), the `--key` states
//! ([`keys`]), and a Redis Cluster or Sentinel-managed member as one node
//! ([`member`], [`shard`]), all through [`command`].

mod access;
mod command;
pub(super) mod keys;
pub(super) mod member;
pub(super) mod node;
mod shard;
