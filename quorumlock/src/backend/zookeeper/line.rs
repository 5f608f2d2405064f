//! A lock's line on ZooKeeper: the contenders' nodes under the resource's
//! parent node, named and ordered as kazoo's `Lock` names and orders them.

use zookeeper_client::Client;

use super::Ensemble;
use crate::error::Result;

/// What separates a contender's own prefix from the sequence number that
/// ZooKeeper appends, in kazoo's names: `<uuid hex>__lock__0000000007`.
pub(crate) const LOCK_MARK: &str = "__lock__";

/// The contenders under a lock's parent node, in the order they hold it.
pub(crate) struct Line {
    /// Node names, lowest sequence first.
    pub(crate) contenders: Vec<String>,
    /// The parent's pzxid when read: the zxid of the last creation or
    /// deletion of a node in it.
    pub(crate) changed_at: i64,
}

/// Reads the line under `parent` (empty when the parent does not exist).
/// Only names of the recipe count (`...__lock__` and a sequence number),
/// ordered by that number, as kazoo orders them: a lock on `a` ignores the
/// parent node of a lock on `a/b`.
pub(crate) async fn line(store: &Ensemble, client: &Client, parent: &str) -> Result<Line> {
    let (children, changed_at) = match store.call(client.get_children(parent)).await {
        Ok((children, stat)) => (children, stat.pzxid),
        Err(zookeeper_client::Error::NoNode) => (Vec::new(), 0),
        Err(error) => return Err(store.failed(&error)),
    };
    let mut contenders: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|name| sequence(&name).map(|seq| (seq, name)))
        .collect();
    contenders.sort_unstable();
    Ok(Line {
        contenders: contenders.into_iter().map(|(_, name)| name).collect(),
        changed_at,
    })
}

/// The sequence number of a contender's node name, or `None` for a name the
/// recipe does not make.
pub(crate) fn sequence(name: &str) -> Option<u64> {
    let (_, digits) = name.rsplit_once(LOCK_MARK)?;
    if digits.len() < 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_of_the_recipe_have_a_sequence() {
        assert_eq!(sequence("0123abcd__lock__0000000007"), Some(7));
        assert_eq!(sequence("x__lock__12345678901"), Some(12_345_678_901));
        for other in [
            "b",
            "x__lock__123",
            "x__lock__",
            "x-lock-0000000001",
            "x__lock__00000000a1",
        ] {
            assert_eq!(sequence(other), None, "{other}");
        }
    }
}
