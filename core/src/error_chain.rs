//! An error and its causes as one line for people, e.g. "cannot reach …:
//! connection refused". tonic's transport errors say only "transport error"
//! at the top and keep the reason in their sources, so that bare phrase is
//! left out, and so is a cause whose text an earlier part already contains.

/// `error` and each of its sources, joined by ": ".
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if text != "transport error" && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    if parts.is_empty() {
        "transport error".into()
    } else {
        parts.join(": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("transport error")]
    struct Transport(#[source] std::io::Error);

    #[test]
    fn causes_are_joined_without_the_bare_transport_phrase() {
        let e = Transport(std::io::Error::other("connection refused"));
        assert_eq!(error_chain(&e), "connection refused");
        let plain = std::io::Error::other("disk full");
        assert_eq!(error_chain(&plain), "disk full");
    }
}
