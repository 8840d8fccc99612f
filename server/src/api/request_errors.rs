//! Statuses that tonic itself makes for requests a client got wrong, given
//! the codes of the API's contract (docs/api.md: a bad request is the
//! client's to fix, never a failure of the host).
//!
//! Before a handler runs, tonic decodes the request; what it answers then is
//! rewritten by [`RequestErrorsLayer`]:
//!
//! * bytes that are not a message of the method's request type (a cut
//!   varint, a wrong wire type, invalid UTF-8 in a string, a bad tag): tonic
//!   says INTERNAL, the contract INVALID_ARGUMENT;
//! * a message over the 4 MiB limit: tonic says OUT_OF_RANGE, gRPC's status
//!   code table RESOURCE_EXHAUSTED;
//! * a unary call without a request message: tonic says INTERNAL, gRPC's
//!   table (request cardinality) UNIMPLEMENTED.
//!
//! And any status message longer than [`MAX_MESSAGE_BYTES`] is cut there:
//! an error that quotes a client's 1 MiB field would otherwise make a
//! response header larger than clients accept (gRPC's default is 8 KiB).
//!
//! Found by the malformed-request corpus (tests/python/hostile_requests.py).
//! Other statuses pass unchanged.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic::{Code, Status};

const UNDECODABLE: &str = "failed to decode Protobuf message: ";
const TOO_LARGE: &str = "Error, decoded message length too large: ";
const NO_MESSAGE: &str = "Missing request message.";

/// The longest status message sent; longer ones are cut (on a character boundary).
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The status the client gets instead of `status` for a request to
/// `method` (the request path), or `None` to keep `status`.
pub fn client_status(status: &Status, method: &str) -> Option<Status> {
    let rewritten = tonic_status(status, method);
    let message = rewritten.as_ref().unwrap_or(status).message();
    if message.len() <= MAX_MESSAGE_BYTES {
        return rewritten;
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = format!("{}… (cut; {} bytes in all)", &message[..end], message.len());
    Some(Status::new(
        rewritten.as_ref().unwrap_or(status).code(),
        cut,
    ))
}

/// The contract's status for one tonic makes before a handler runs.
fn tonic_status(status: &Status, method: &str) -> Option<Status> {
    // A known method's path is short; anything else never reaches decoding.
    let method = match method.strip_prefix('/') {
        Some(m) if m.len() <= 100 => m,
        _ => "this method",
    };
    let message = status.message();
    match status.code() {
        Code::Internal => {
            if let Some(reason) = message.strip_prefix(UNDECODABLE) {
                Some(Status::invalid_argument(format!(
                    "the request is not a valid request message of {method} ({reason}); \
                     send the message proto/tli/v1 defines for it"
                )))
            } else if message == NO_MESSAGE {
                Some(Status::unimplemented(format!(
                    "{method} takes exactly one request message; the call sent none"
                )))
            } else {
                None
            }
        }
        Code::OutOfRange => message.strip_prefix(TOO_LARGE).map(|sizes| {
            Status::resource_exhausted(format!(
                "the request message is too large ({sizes}); send fewer or shorter fields"
            ))
        }),
        _ => None,
    }
}

/// A tower layer for the gRPC server that applies [`client_status`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestErrorsLayer;

impl<S> tower::Layer<S> for RequestErrorsLayer {
    type Service = RequestErrors<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestErrors { inner }
    }
}

/// The service [`RequestErrorsLayer`] wraps around the gRPC routes.
#[derive(Clone, Debug)]
pub struct RequestErrors<S> {
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for RequestErrors<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    R: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.uri().path().to_string();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            // A status tonic answers before the handler runs comes as headers
            // only, with the `Status` itself among the extensions.
            let replacement = response
                .extensions()
                .get::<Status>()
                .and_then(|status| client_status(status, &method));
            Ok(match replacement {
                Some(status) => status.into_http(),
                None => response,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METHOD: &str = "/tli.v1.TrainingService/StartTraining";

    #[test]
    fn tonic_statuses_for_client_mistakes_get_the_contract_codes() {
        let undecodable = Status::internal(
            "failed to decode Protobuf message: StartTrainingRequest.seed: invalid varint",
        );
        let s = client_status(&undecodable, METHOD).unwrap();
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(
            s.message()
                .contains("StartTrainingRequest.seed: invalid varint")
                && s.message().contains("tli.v1.TrainingService/StartTraining"),
            "{}",
            s.message()
        );

        let large = Status::out_of_range(
            "Error, decoded message length too large: found 5242918 bytes, the limit is: 4194304 bytes",
        );
        let s = client_status(&large, METHOD).unwrap();
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.message().contains("4194304"), "{}", s.message());

        let none = Status::internal("Missing request message.");
        assert_eq!(
            client_status(&none, METHOD).unwrap().code(),
            Code::Unimplemented
        );
    }

    #[test]
    fn other_statuses_pass_unchanged() {
        for status in [
            Status::internal("job store: disk I/O error"),
            Status::out_of_range("something else"),
            Status::invalid_argument("failed to decode Protobuf message: x"),
            Status::not_found("job 9 not found"),
        ] {
            assert!(client_status(&status, METHOD).is_none(), "{status:?}");
        }
        let long = format!("/{}", "x".repeat(500));
        let s = client_status(&Status::internal(NO_MESSAGE), &long).unwrap();
        assert!(s.message().len() < 200, "{}", s.message());
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let echo = format!("models[0] (é{}): no such plugin", "p".repeat(1 << 20));
        let s = client_status(&Status::invalid_argument(echo), METHOD).unwrap();
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(
            s.message().len() < MAX_MESSAGE_BYTES + 64,
            "{}",
            s.message().len()
        );
        assert!(s.message().starts_with("models[0] (é") && s.message().ends_with("bytes in all)"));
        let short = Status::invalid_argument("x".repeat(MAX_MESSAGE_BYTES));
        assert!(client_status(&short, METHOD).is_none());
    }
}
