//! API errors: `{"error": "<Code>", "message": "..."}` with the status the
//! HTTP API v1 gives each code (BRIEF.md).

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use quire_client::ClientError;

/// An error answered to an HTTP caller.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// The stable code name.
    pub code: &'static str,
    /// Detail for humans.
    pub message: String,
}

impl ApiError {
    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, code: "BadRequest", message: message.into() }
    }

    /// 409 NotWriter: this gateway does not hold the ledger's writer.
    pub fn not_writer(ledger_id: u64) -> ApiError {
        ApiError {
            status: StatusCode::CONFLICT,
            code: "NotWriter",
            message: format!("this gateway does not hold the writer of ledger {ledger_id}"),
        }
    }

    /// 404 for an unknown path.
    pub fn not_found(what: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::NOT_FOUND, code: "NotFound", message: what.into() }
    }

    /// 413 EntryTooLarge.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::PAYLOAD_TOO_LARGE, code: "EntryTooLarge", message: message.into() }
    }

    /// 401: a bearer token is required and was missing or wrong.
    pub fn unauthorised() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "Unauthorized",
            message: "a valid bearer token is required (Authorization: Bearer <token>)".into(),
        }
    }

    /// 408: the request body did not arrive in time.
    pub fn body_timeout(limit: std::time::Duration) -> ApiError {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            code: "RequestTimeout",
            message: format!("the request body did not arrive within {} ms", limit.as_millis()),
        }
    }

    /// 403: authenticated, but this ledger is another principal's.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::FORBIDDEN, code: "Forbidden", message: message.into() }
    }

    /// 504 Timeout: the request's work outlived the gateway's request timeout.
    pub fn timeout(limit: std::time::Duration) -> ApiError {
        ApiError {
            status: StatusCode::GATEWAY_TIMEOUT,
            code: "Timeout",
            message: format!("the request took longer than {} ms", limit.as_millis()),
        }
    }

    /// 503 Overloaded: a bound on concurrent work was reached; retry later.
    pub fn overloaded(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::SERVICE_UNAVAILABLE, code: "Overloaded", message: message.into() }
    }

    /// 500, for what should not happen.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, code: "Internal", message: message.into() }
    }

    /// The message an HTTP caller reads: without internal addresses
    /// (crate::redact). The whole one goes to the gateway's log.
    pub fn public_message(&self) -> String {
        let public = crate::redact::without_addresses(&self.message);
        if let std::borrow::Cow::Owned(_) = public {
            tracing::info!(code = self.code, status = self.status.as_u16(), message = %self.message, "error answered without its internal addresses");
        }
        public.into_owned()
    }

    /// The API's error body, `{"error", "message"}`, as every route and
    /// stream answers it.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({ "error": self.code, "message": self.public_message() })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut r = HttpResponse::build(self.status);
        if self.status == StatusCode::UNAUTHORIZED {
            r.insert_header(("WWW-Authenticate", "Bearer"));
        }
        r.json(self.body())
    }
}

impl From<ClientError> for ApiError {
    fn from(e: ClientError) -> ApiError {
        let status = match &e {
            ClientError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ClientError::NoSuchLedger(_) | ClientError::NoSuchEntry(..) => StatusCode::NOT_FOUND,
            ClientError::LedgerFenced(_) | ClientError::LedgerClosed(_) | ClientError::WriterClosed(_) => {
                StatusCode::CONFLICT
            }
            ClientError::EntryTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ClientError::PermissionDenied(_) => StatusCode::FORBIDDEN,
            ClientError::NotEnoughBookies(_)
            | ClientError::MetadataUnavailable(_)
            | ClientError::Backpressure(_)
            | ClientError::RecoveryFailed(..) => StatusCode::SERVICE_UNAVAILABLE,
            ClientError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ClientError::NoSuchLog(_) | ClientError::NoSuchCursor { .. } => StatusCode::NOT_FOUND,
            ClientError::LogExists(_)
            | ClientError::LogFenced(_)
            | ClientError::SequenceTooOld { .. }
            | ClientError::LedgerInLog(..) => StatusCode::CONFLICT,
            ClientError::Trimmed { .. } => StatusCode::GONE,
            ClientError::PreconditionFailed { .. } => StatusCode::PRECONDITION_FAILED,
            ClientError::Corrupt(..) | ClientError::InvalidMetadata(_) | ClientError::Rpc(_) => StatusCode::BAD_GATEWAY,
        };
        ApiError { status, code: e.code_name(), message: e.to_string() }
    }
}
