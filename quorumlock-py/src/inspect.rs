//! The operator tools' reports as dicts: `inspect` and `force_unlock`.

use quorumlock::{
    DeletedValue, Inspection, KeyState, NodeError, NodeErrorKind, UnlockOutcome, UnlockReport, Verdict,
};

use crate::value::Value;

/// A failed node's error, as the library words it.
fn failure(node: &str, kind: &NodeErrorKind) -> Value {
    let error = NodeError {
        node: node.to_owned(),
        kind: kind.clone(),
    };
    Value::Str(error.to_string())
}

fn key_state(node: &str, state: &KeyState) -> Vec<(&'static str, Value)> {
    match state {
        KeyState::Free => vec![("state", Value::Str("free".into()))],
        KeyState::Held { token, ttl } => vec![
            ("state", Value::Str("held".into())),
            ("token", Value::Str(token.clone())),
            ("ttl", Value::seconds(*ttl)),
        ],
        KeyState::WithoutTtl { value } => vec![
            ("state", Value::Str("without_ttl".into())),
            ("value", Value::Str(value.clone())),
        ],
        KeyState::WrongType { kind, ttl } => vec![
            ("state", Value::Str("wrong_type".into())),
            ("kind", Value::Str(kind.clone())),
            ("ttl", ttl.map_or(Value::None, Value::seconds)),
        ],
        KeyState::Failed(kind) => vec![
            ("state", Value::Str("failed".into())),
            ("error", failure(node, kind)),
        ],
        _ => vec![("state", Value::Str("unknown".into()))],
    }
}

/// `redlock.inspect(resource)` as a dict: the verdict of a majority
/// (`"held"` with the holder's `token` and `valid_for` seconds, `"free"`,
/// `"indeterminate"`) and what each node holds.
pub fn inspection(inspection: &Inspection) -> Value {
    let (verdict, token, valid_for) = match &inspection.verdict {
        Verdict::Held { token, valid_for, .. } => {
            ("held", Value::Str(token.clone()), Value::seconds(*valid_for))
        }
        Verdict::Free => ("free", Value::None, Value::None),
        _ => ("indeterminate", Value::None, Value::None),
    };
    let nodes = inspection
        .nodes
        .iter()
        .map(|node| {
            let mut entries = vec![("node", Value::Str(node.node.clone()))];
            entries.extend(key_state(&node.node, &node.state));
            entries.push(("waiters", node.waiters.map_or(Value::None, Value::Int)));
            Value::Dict(entries)
        })
        .collect();
    Value::Dict(vec![
        ("resource", Value::Str(inspection.resource.clone())),
        ("verdict", Value::Str(verdict.into())),
        ("token", token),
        ("valid_for", valid_for),
        ("quorum", Value::count(inspection.quorum)),
        ("elapsed", Value::seconds(inspection.elapsed)),
        ("nodes", Value::List(nodes)),
    ])
}

/// `force_unlock` as a dict: what each node deleted.
pub fn unlock_report(report: &UnlockReport) -> Value {
    let nodes = report
        .nodes
        .iter()
        .map(|node| {
            let mut entries = vec![("node", Value::Str(node.node.clone()))];
            match &node.outcome {
                UnlockOutcome::Deleted(DeletedValue::String(token)) => {
                    entries.push(("outcome", Value::Str("deleted".into())));
                    entries.push(("value", Value::Str(token.clone())));
                }
                UnlockOutcome::Deleted(DeletedValue::Other { kind }) => {
                    entries.push(("outcome", Value::Str("deleted".into())));
                    entries.push(("kind", Value::Str(kind.clone())));
                }
                UnlockOutcome::NotHeld => entries.push(("outcome", Value::Str("not_held".into()))),
                UnlockOutcome::Failed(kind) => {
                    entries.push(("outcome", Value::Str("failed".into())));
                    entries.push(("error", failure(&node.node, kind)));
                }
                _ => entries.push(("outcome", Value::Str("unknown".into()))),
            }
            Value::Dict(entries)
        })
        .collect();
    Value::Dict(vec![
        ("resource", Value::Str(report.resource.clone())),
        ("deleted", Value::count(report.deleted())),
        ("answered", Value::count(report.answered())),
        ("quorum", Value::count(report.quorum)),
        ("nodes", Value::List(nodes)),
    ])
}
