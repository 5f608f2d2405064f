//! The one request type: what every request to a lock node implements.

use redis::{Cmd, RedisResult, Value};

/// A request to one lock node: its command and the parsing of the reply,
/// defined together.
pub(crate) trait Request {
    /// The parsed reply.
    type Reply;

    /// The command that carries the request.
    fn command(&self) -> Cmd;

    /// The reply to [`Request::command`]. A reply of any other shape (a
    /// connection out of step, something that is not Redis on the port) is
    /// an error: the node counts as failed, never as having agreed.
    fn parse(&self, reply: Value) -> RedisResult<Self::Reply>;

    /// Whether the request takes or keeps a lock, so that a node in
    /// replica-acknowledged mode follows it with `WAIT`.
    fn writes_lock(&self) -> bool {
        false
    }

    /// The key whose hash slot the request is routed by on a Redis Cluster
    /// member; every other key it touches shares that slot (see
    /// [`keys`](super::keys)). `None` for a request without keys, which any
    /// server of the member may answer.
    fn route_key(&self) -> Option<&str> {
        None
    }
}
