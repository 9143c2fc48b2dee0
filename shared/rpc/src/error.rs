//! The errors a caller and a handler see.

use quire_proto::v1::ErrorCode;

/// Why a call did not return its response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RpcError {
    /// The deadline passed: waiting for a connection, an in-flight slot, or the reply.
    /// The request may or may not have been executed.
    #[error("timed out after {elapsed_ms} ms calling {method} on {peer}")]
    Timeout {
        /// The method called.
        method: &'static str,
        /// The peer's address.
        peer: String,
        /// Time spent.
        elapsed_ms: u64,
    },
    /// No connection could be made (refused handshake, unreachable, in backoff).
    #[error("cannot connect to {peer}: {reason}")]
    Unavailable {
        /// The peer's address.
        peer: String,
        /// The last connection error.
        reason: String,
    },
    /// The connection or lane failed with the request in flight. It may or may
    /// not have been executed.
    #[error("connection to {peer} lost: {reason}")]
    ConnectionLost {
        /// The peer's address.
        peer: String,
        /// Why the connection ended, as quinn or the peer said it.
        reason: String,
    },
    /// The peer's certificate does not name the role or id the caller expected.
    #[error("peer {peer} is {actual}, expected {expected}")]
    WrongPeer {
        /// The peer's address.
        peer: String,
        /// What the caller expected, `role/id` or `role/*`.
        expected: String,
        /// What the certificate says.
        actual: String,
    },
    /// The server answered with an error code.
    #[error("{code:?} from {peer}: {message}")]
    Remote {
        /// The peer's address.
        peer: String,
        /// The stable code.
        code: ErrorCode,
        /// The server's explanation.
        message: String,
        /// With NOT_LEADER: where the leader is, when known.
        leader_hint: Option<String>,
        /// The answering server's instance id.
        instance_id: String,
    },
    /// The server answered with a body of the wrong type or without a body.
    #[error("protocol violation by {peer}: {detail}")]
    Protocol {
        /// The peer's address.
        peer: String,
        /// What was wrong.
        detail: String,
    },
    /// The request does not fit in a frame; it was not sent.
    #[error("{method} request of {bytes} bytes exceeds the frame limit of {max_bytes} bytes")]
    RequestTooLarge {
        /// The method called.
        method: &'static str,
        /// The encoded size.
        bytes: usize,
        /// The limit.
        max_bytes: usize,
    },
    /// The client was shut down.
    #[error("client closed")]
    Closed,
}

impl RpcError {
    /// The server's error code, if the server answered.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            RpcError::Remote { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// What the server said, without who said it: for a caller that asked
    /// a service (not a replica) and passes the answer on, where the
    /// answering replica's address is noise, or more than the reader may
    /// see (an HTTP client of the gateway). The whole error, this and the
    /// rest, otherwise.
    pub fn answer(&self) -> String {
        match self {
            RpcError::Remote { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

/// A handler's failure, sent to the caller as a code and a message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ServiceError {
    /// The stable code.
    pub code: ErrorCode,
    /// Detail for the caller's logs.
    pub message: String,
    /// With NOT_LEADER: the leader's address, when known.
    pub leader_hint: Option<String>,
}

impl ServiceError {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ServiceError { code, message: message.into(), leader_hint: None }
    }

    /// BAD_REQUEST.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    /// INTERNAL.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}
