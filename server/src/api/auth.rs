//! Bearer-token authentication for the control API. When the server has a
//! token, every RPC except the health service must carry the metadata
//! `authorization: Bearer <token>`; anything else is UNAUTHENTICATED. The
//! comparison is constant-time over SHA-256 digests, so neither the token's
//! content nor its length leaks through timing. Without a token every
//! request passes (the server only allows that on loopback).

use sha2::{Digest, Sha256};
use std::sync::{Arc, RwLock};
use subtle::ConstantTimeEq;
use tonic::metadata::MetadataMap;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// A tonic interceptor: checks the bearer token when one is configured.
#[derive(Clone, Default)]
pub struct Auth {
    /// SHA-256 of the expected token, shared by every clone (a new token
    /// takes effect for all of them at once); `None` = no token required.
    expected: Option<Arc<RwLock<[u8; 32]>>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("token_required", &self.required())
            .finish()
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl Auth {
    /// Every request passes.
    pub fn none() -> Self {
        Self { expected: None }
    }

    /// Requests must carry `authorization: Bearer <token>`.
    pub fn token(token: &str) -> Self {
        Self {
            expected: Some(Arc::new(RwLock::new(digest(token.as_bytes())))),
        }
    }

    /// From now on this token, not the previous one, is accepted (by this
    /// `Auth` and every clone of it). Without a token required, nothing changes.
    pub fn set_token(&self, token: &str) {
        if let Some(expected) = &self.expected {
            let mut current = expected.write().unwrap_or_else(|p| p.into_inner());
            *current = digest(token.as_bytes());
        }
    }

    /// Whether a token is required.
    pub fn required(&self) -> bool {
        self.expected.is_some()
    }

    /// Checks a request's metadata.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let value = metadata.get("authorization").map(|v| v.as_bytes());
        self.check_authorization(value)
            .map_err(Status::unauthenticated)
    }

    /// Checks the value of an `authorization` header (gRPC metadata or an
    /// HTTP header); the error says what was wrong, never the token.
    pub fn check_authorization(&self, value: Option<&[u8]>) -> Result<(), &'static str> {
        let Some(expected) = &self.expected else {
            return Ok(());
        };
        let Some(value) = value else {
            return Err(
                "missing authorization: this server requires `authorization: Bearer <token>` \
                 (tli: --token or TLI_TOKEN)",
            );
        };
        let scheme = b"bearer ";
        let token = match value.get(..scheme.len()) {
            Some(prefix) if prefix.eq_ignore_ascii_case(scheme) => &value[scheme.len()..],
            _ => return Err("authorization: expected `Bearer <token>`"),
        };
        let token = token.trim_ascii();
        let expected = *expected.read().unwrap_or_else(|p| p.into_inner());
        if bool::from(digest(token).ct_eq(&expected)) {
            Ok(())
        } else {
            Err("authorization: the token is not accepted")
        }
    }
}

impl Interceptor for Auth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.check(request.metadata())?;
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::metadata::MetadataValue;

    fn with(value: Option<&'static str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(v) = value {
            m.insert("authorization", MetadataValue::from_static(v));
        }
        m
    }

    #[test]
    fn a_token_is_checked() {
        let auth = Auth::token("s3cret-token");
        assert!(auth.check(&with(Some("Bearer s3cret-token"))).is_ok());
        assert!(auth.check(&with(Some("bearer s3cret-token"))).is_ok());
        for bad in [
            None,
            Some("Bearer s3cret-tokeN"),
            Some("Bearer "),
            Some("Basic s3cret-token"),
            Some("s3cret-token"),
        ] {
            let e = auth.check(&with(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{bad:?}");
            assert!(!e.message().contains("s3cret"), "{}", e.message());
        }
    }

    #[test]
    fn no_token_lets_everything_through() {
        assert!(Auth::none().check(&with(None)).is_ok());
        assert!(!Auth::none().required());
    }
}
