//! Streamed SHA-256, as hex: checkpoint files and manifests
//! (`orchestrator::checkpoint`) and plugin libraries (`registry`).

use sha2::{Digest, Sha256};
use std::io::{self, Read, Write};

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// SHA-256 of `bytes`, hex.
pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Reads `from` to its end through SHA-256, writing every byte to `copy_to`
/// too when given; returns (hex digest, bytes read).
pub fn sha256_stream(
    mut from: impl Read,
    mut copy_to: Option<&mut dyn Write>,
) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        if let Some(to) = copy_to.as_mut() {
            to.write_all(&buf[..n])?;
        }
        total += n as u64;
    }
    Ok((hex(&hasher.finalize()), total))
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_digest_and_a_faithful_copy() {
        let mut copy = Vec::new();
        let (digest, n) = super::sha256_stream(&b"abc"[..], Some(&mut copy)).unwrap();
        assert_eq!(
            digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!((n, copy.as_slice()), (3, &b"abc"[..]));
        assert_eq!(super::sha256(b"abc"), digest);
    }
}
