//! Position rules: a forecaster's forecasts of the next bar's return →
//! the position held over it (in contracts, within `±max_contracts`).
//!
//! * **sign**: `max_contracts · sign(P50)` (flat on 0).
//! * **scaled** (volatility-aware): `max_contracts · clamp(P50 / σ, −1, 1)`
//!   with `σ = (P90 − P10) / 2.5631`, the standard deviation a normal
//!   forecast with that P10–P90 width has (2 × 1.28155); fractional
//!   contracts, the size a capital-weighted book would hold.
//! * **threshold**: `max_contracts · sign(P50)` only when `|P50| > k · (P90
//!   − P10)`, else flat.
//!
//! A point forecaster (no P10/P90) has the sign rule only. A forecast that
//! is not finite (a model that gave none) means flat.

use crate::MetricsError;
use serde::Serialize;

/// Width of a normal's 10–90 % interval in standard deviations.
pub const P10_P90_SIGMAS: f64 = 2.5631;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum PositionRule {
    Sign,
    Scaled,
    Threshold { k: f64 },
}

impl PositionRule {
    /// `sign`, `scaled`, `threshold` (k = 0.1) or `threshold:K`.
    pub fn parse(text: &str) -> Result<Self, MetricsError> {
        match text.trim() {
            "sign" => Ok(Self::Sign),
            "scaled" => Ok(Self::Scaled),
            "threshold" => Ok(Self::Threshold { k: 0.1 }),
            other => match other.strip_prefix("threshold:").map(str::parse::<f64>) {
                Some(Ok(k)) if k.is_finite() && k >= 0.0 => Ok(Self::Threshold { k }),
                _ => Err(MetricsError::config(format!(
                    "position rule {other:?}: use sign, scaled, threshold or threshold:K (K ≥ 0)"
                ))),
            },
        }
    }

    pub fn name(&self) -> String {
        match self {
            Self::Sign => "sign".into(),
            Self::Scaled => "scaled".into(),
            Self::Threshold { k } => format!("threshold:{k}"),
        }
    }
}

/// The positions `rule` takes on the forecasts `p50` (and the quantiles
/// `p10`, `p90` where the rule needs them).
pub fn positions(
    rule: PositionRule,
    p50: &[f64],
    band: Option<(&[f64], &[f64])>,
    max_contracts: f64,
) -> Result<Vec<f64>, MetricsError> {
    if !(max_contracts.is_finite() && max_contracts > 0.0) {
        return Err(MetricsError::config(format!(
            "max_contracts must be finite and > 0, got {max_contracts}"
        )));
    }
    let sign = |x: f64| {
        if x.is_finite() && x != 0.0 {
            max_contracts * x.signum()
        } else {
            0.0
        }
    };
    let width = |i: usize| -> Result<f64, MetricsError> {
        let (p10, p90) = band.ok_or_else(|| {
            MetricsError::config(format!(
                "the {} rule needs P10 and P90 forecasts; this model gives a point forecast \
                 (use the sign rule)",
                rule.name()
            ))
        })?;
        if p10.len() != p50.len() || p90.len() != p50.len() {
            return Err(MetricsError::data(
                "P10, P50 and P90 have different lengths",
            ));
        }
        Ok(p90[i] - p10[i])
    };
    (0..p50.len())
        .map(|i| {
            Ok(match rule {
                PositionRule::Sign => sign(p50[i]),
                PositionRule::Scaled => {
                    let sigma = width(i)? / P10_P90_SIGMAS;
                    if sigma.is_finite() && sigma > 0.0 && p50[i].is_finite() {
                        max_contracts * (p50[i] / sigma).clamp(-1.0, 1.0)
                    } else {
                        0.0
                    }
                }
                PositionRule::Threshold { k } => {
                    let w = width(i)?;
                    if w.is_finite() && p50[i].abs() > k * w {
                        sign(p50[i])
                    } else {
                        0.0
                    }
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_rules_by_hand() {
        let p50 = [0.01, -0.002, 0.0, f64::NAN, 0.5];
        let p10 = [-0.02, -0.03, -0.01, -0.01, -0.1];
        let p90 = [0.03, 0.01, 0.01, 0.01, 0.1];
        let band = Some((&p10[..], &p90[..]));
        assert_eq!(
            positions(PositionRule::Sign, &p50, None, 2.0).unwrap(),
            vec![2.0, -2.0, 0.0, 0.0, 2.0]
        );
        let scaled = positions(PositionRule::Scaled, &p50, band, 2.0).unwrap();
        assert!((scaled[0] - 2.0 * 0.01 / (0.05 / 2.5631)).abs() < 1e-12);
        assert!((scaled[1] - 2.0 * -0.002 / (0.04 / 2.5631)).abs() < 1e-12);
        assert_eq!(&scaled[2..], &[0.0, 0.0, 2.0], "capped at max_contracts");
        // |P50| > 0.1 × width: 0.01 > 0.005 yes; 0.002 > 0.004 no.
        assert_eq!(
            positions(PositionRule::Threshold { k: 0.1 }, &p50, band, 1.0).unwrap(),
            vec![1.0, 0.0, 0.0, 0.0, 1.0]
        );
        let e = positions(PositionRule::Scaled, &p50, None, 1.0).unwrap_err();
        assert!(e.to_string().contains("use the sign rule"), "{e}");
        assert!(positions(PositionRule::Sign, &p50, None, 0.0).is_err());
    }

    #[test]
    fn rules_parse() {
        assert_eq!(PositionRule::parse("sign").unwrap(), PositionRule::Sign);
        assert_eq!(
            PositionRule::parse("threshold:0.25").unwrap(),
            PositionRule::Threshold { k: 0.25 }
        );
        assert!(PositionRule::parse("threshold:-1").is_err());
        assert!(PositionRule::parse("martingale").is_err());
    }
}
