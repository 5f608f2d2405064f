//! The Redlock backend: N independent Redis nodes.

pub(crate) mod attempt;
pub(crate) mod fence;
pub(crate) mod hold;
pub(crate) mod inspect;
pub(crate) mod kind;
pub(crate) mod masters;
pub(crate) mod node;
pub(crate) mod quorum;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod waiter;
pub(crate) mod wire;
