//! The validity dates of a TLS certificate, read so that a host warns at
//! start when its certificate has expired, is not valid yet or expires
//! soon (clients refuse such a certificate; the server would not notice).
//! Only the DER fields on the way to `validity` are walked (RFC 5280,
//! section 4.1: `Certificate → TBSCertificate → version, serialNumber,
//! signature, issuer, validity`).

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// A warning about the first certificate of `pem` at `now` (Unix seconds):
/// expired, not yet valid, or expiring within 14 days; `None` when it is
/// valid for longer or its dates cannot be read.
pub fn certificate_warning(pem: &[u8], now: i64) -> Option<String> {
    let (not_before, not_after) = validity(pem)?;
    let when = |t: i64| tli_data::timefmt::format(t.saturating_mul(1_000_000_000));
    if now < not_before {
        Some(format!(
            "the certificate is not valid until {}; clients will refuse it until then",
            when(not_before)
        ))
    } else if now > not_after {
        Some(format!(
            "the certificate expired at {}; clients will refuse it (renew it and restart)",
            when(not_after)
        ))
    } else if not_after - now < 14 * 86_400 {
        Some(format!(
            "the certificate expires at {} (in {} days); renew it and restart before then",
            when(not_after),
            (not_after - now) / 86_400
        ))
    } else {
        None
    }
}

/// (notBefore, notAfter) of the first certificate in `pem`, Unix seconds.
pub fn validity(pem: &[u8]) -> Option<(i64, i64)> {
    let der = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    let (certificate, _) = element(der.as_ref(), 0x30)?;
    let (tbs, _) = element(certificate, 0x30)?;
    let mut rest = tbs;
    if rest.first() == Some(&0xa0) {
        rest = element(rest, 0xa0)?.1; // version
    }
    rest = element(rest, 0x02)?.1; // serialNumber
    rest = element(rest, 0x30)?.1; // signature
    rest = element(rest, 0x30)?.1; // issuer
    let (validity, _) = element(rest, 0x30)?;
    let (not_before, after) = time(validity)?;
    let (not_after, _) = time(after)?;
    Some((not_before, not_after))
}

/// The content of the DER element at the start of `der`, if its tag is
/// `tag`, and what follows it.
fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = der.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, mut rest) = rest.split_first()?;
    let len = if len < 0x80 {
        usize::from(len)
    } else {
        let bytes = usize::from(len & 0x7f);
        if bytes == 0 || bytes > 4 || rest.len() < bytes {
            return None;
        }
        let n = rest[..bytes]
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        rest = &rest[bytes..];
        n
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// A UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) at
/// the start of `der` as Unix seconds, and what follows it.
fn time(der: &[u8]) -> Option<(i64, &[u8])> {
    let (text, rest, long_year) = match der.first()? {
        0x17 => {
            let (t, r) = element(der, 0x17)?;
            (t, r, false)
        }
        0x18 => {
            let (t, r) = element(der, 0x18)?;
            (t, r, true)
        }
        _ => return None,
    };
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let digits = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, at) = if long_year {
        (digits(0..4)?, 4)
    } else {
        // RFC 5280: 50–99 are 19xx, 00–49 are 20xx.
        let yy = digits(0..2)?;
        (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
    };
    let month = u32::try_from(digits(at..at + 2)?).ok()?;
    let day = u32::try_from(digits(at + 2..at + 4)?).ok()?;
    let (h, m, s) = (
        digits(at + 4..at + 6)?,
        digits(at + 6..at + 8)?,
        digits(at + 8..at + 10)?,
    );
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let days = tli_data::timefmt::days_from_civil(year, month, day);
    Some((days * 86_400 + h * 3600 + m * 60 + s, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate made with `openssl req -x509 -days 1` on
    /// 2026-12-05 20:08 UTC (not before then, not after a day later).
    const PEM: &str = include_str!("testdata/one_day.pem");

    #[test]
    fn dates_are_read_and_each_case_warns() {
        let (not_before, not_after) = validity(PEM.as_bytes()).unwrap();
        assert_eq!(not_after - not_before, 86_400);
        assert_eq!(
            tli_data::timefmt::format(not_before * 1_000_000_000),
            "2026-12-05T20:08:25Z"
        );
        let early = certificate_warning(PEM.as_bytes(), not_before - 60).unwrap();
        assert!(
            early.contains("not valid until 2026-12-05T20:08:25Z"),
            "{early}"
        );
        let late = certificate_warning(PEM.as_bytes(), not_after + 1).unwrap();
        assert!(late.contains("expired at 2026-12-06T20:08:25Z"), "{late}");
        let soon = certificate_warning(PEM.as_bytes(), not_before + 60).unwrap();
        assert!(soon.contains("(in 0 days)"), "{soon}");
        assert_eq!(certificate_warning(b"not a certificate", 0), None);
    }

    #[test]
    fn both_time_forms_are_read() {
        assert_eq!(time(b"\x17\x0d491231235959Z").unwrap().0, 2_524_607_999);
        assert_eq!(time(b"\x17\x0d500101000000Z").unwrap().0, -631_152_000);
        assert_eq!(time(b"\x18\x0f20500101000000Z").unwrap().0, 2_524_608_000);
        assert_eq!(time(b"\x18\x0f20501301000000Z"), None);
    }
}
