//! Nodes are interchangeable: renaming them maps every run to another run
//! with the same outcome. Exhaustive runs of a safe configuration explore
//! one state per class of renamings, its canonical form, which cuts the
//! states by up to N! without changing which properties hold.

use std::cmp::Ordering;

use crate::state::{Nodes, Phase, State};

/// Moves bit `from[i]` of `set` to bit `i`.
fn remap(set: Nodes, order: &[usize]) -> Nodes {
    order
        .iter()
        .enumerate()
        .fold(0, |out, (to, &from)| out | (((set >> from) & 1) << to))
}

/// The node sets a client's phase holds, in a fixed order.
fn sets(phase: &Phase) -> [Nodes; 2] {
    match *phase {
        Phase::Idle => [0, 0],
        Phase::Acquiring { granted, refused, .. } => [granted, refused],
        Phase::Fencing {
            accepted, rejected, ..
        } => [accepted, rejected],
        Phase::Holding { renewal, .. } => renewal.map_or([0, 0], |r| [r.confirmed, r.foreign]),
    }
}

/// Renames the node sets of a client's phase.
fn rename(phase: &mut Phase, order: &[usize]) {
    match phase {
        Phase::Idle => {}
        Phase::Acquiring { granted, refused, .. } => {
            *granted = remap(*granted, order);
            *refused = remap(*refused, order);
        }
        Phase::Fencing {
            accepted, rejected, ..
        } => {
            *accepted = remap(*accepted, order);
            *rejected = remap(*rejected, order);
        }
        Phase::Holding { renewal, .. } => {
            if let Some(r) = renewal {
                r.confirmed = remap(r.confirmed, order);
                r.foreign = remap(r.foreign, order);
            }
        }
    }
}

/// The canonical form of `state`: nodes sorted by everything that tells
/// them apart (the node, the requests queued to it, what each client knows
/// of it, the ghost's record of it), compared field by field in that order.
/// The comparison allocates nothing: it runs for every state the checker
/// generates.
pub fn canonical(state: State) -> State {
    let nodes = state.nodes.len();
    let clients = state.clients.len();
    let compare = |a: usize, b: usize| {
        state.nodes[a]
            .cmp(&state.nodes[b])
            .then_with(|| {
                (0..clients)
                    .map(|c| state.to_node[c * nodes + a].cmp(&state.to_node[c * nodes + b]))
                    .find(|order| order.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| {
                state
                    .clients
                    .iter()
                    .map(|client| {
                        let sets = sets(&client.phase);
                        sets.map(|set| (set >> a) & 1)
                            .cmp(&sets.map(|set| (set >> b) & 1))
                    })
                    .find(|order| order.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| state.ghost.excused[a].cmp(&state.ghost.excused[b]))
    };
    let mut order: Vec<usize> = (0..nodes).collect();
    order.sort_by(|&a, &b| compare(a, b));
    if order.iter().enumerate().all(|(i, &n)| i == n) {
        return state;
    }
    let mut out = state.clone();
    for (to, &from) in order.iter().enumerate() {
        out.nodes[to] = state.nodes[from];
        out.ghost.excused[to] = state.ghost.excused[from];
        for c in 0..clients {
            out.to_node[c * nodes + to].clone_from(&state.to_node[c * nodes + from]);
        }
    }
    for client in &mut out.clients {
        rename(&mut client.phase, &order);
    }
    out
}
