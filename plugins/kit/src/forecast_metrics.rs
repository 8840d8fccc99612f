//! Forecast quality, for the forecasting plugins' `evaluate()`: point and
//! quantile forecasts against the (scaled) targets, computed in `f64` over
//! plain slices (no tch), so every plugin reports the same numbers the same
//! way.
//!
//! Definitions (`y` targets, `p` point forecasts, `ŷ_q` forecasts of quantile
//! `q`, `n` values; slices of equal length, row-major `[rows × horizons]`
//! where horizons matter):
//!
//! * **MSE** `Σ (p − y)² / n`; the **zero forecast**'s `Σ y² / n`; **skill**
//!   `1 − MSE / MSE_zero` (0 when `MSE_zero` is 0).
//! * **hit rate** the fraction of values where `sign(p) = sign(y)` (0 = 0).
//! * **correlation** Pearson's `r` of `p` and `y`; 0 when either is constant.
//! * **pinball (quantile) loss** `QL(y, ŷ, q) = q·(y − ŷ)₊ + (1 − q)·(ŷ − y)₊`,
//!   averaged over values.
//! * **normalized quantile risk** (the TFT paper's q-risk, Lim et al. 2021;
//!   NVIDIA's TFT reproduction reports it the same way) `2·Σ QL / Σ |y|`; 0
//!   when `Σ |y| = 0`.
//! * **coverage** of an interval (e.g. P10–P90): the fraction of values with
//!   `lower ≤ y ≤ upper`.
//! * **per-horizon MSE**: the MSE of each column of `[rows × horizons]`.

/// Point-forecast metrics of one set of forecasts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PointForecastMetrics {
    pub mse: f64,
    pub mse_zero_forecast: f64,
    pub skill: f64,
    pub hit_rate: f64,
    pub correlation: f64,
}

/// All point metrics of `p` against `y` (see the module docs).
pub fn point_metrics(y: &[f32], p: &[f32]) -> PointForecastMetrics {
    let mse = mse(y, p);
    let mse_zero_forecast = mean_of(y.iter().map(|&v| f64::from(v).powi(2)), y.len());
    PointForecastMetrics {
        mse,
        mse_zero_forecast,
        skill: skill(mse, mse_zero_forecast),
        hit_rate: hit_rate(y, p),
        correlation: correlation(y, p),
    }
}

fn mean_of(values: impl Iterator<Item = f64>, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        values.sum::<f64>() / n as f64
    }
}

fn pairs<'a>(y: &'a [f32], p: &'a [f32]) -> impl Iterator<Item = (f64, f64)> + 'a {
    assert_eq!(y.len(), p.len(), "targets and forecasts differ in length");
    y.iter().zip(p).map(|(&a, &b)| (f64::from(a), f64::from(b)))
}

/// Mean squared error.
pub fn mse(y: &[f32], p: &[f32]) -> f64 {
    mean_of(pairs(y, p).map(|(a, b)| (b - a).powi(2)), y.len())
}

/// `1 − mse / mse_zero`; 0 when the zero forecast is already perfect.
pub fn skill(mse: f64, mse_zero_forecast: f64) -> f64 {
    if mse_zero_forecast > 0.0 {
        1.0 - mse / mse_zero_forecast
    } else {
        0.0
    }
}

/// −1, 0 or 1 (0 for both zeros, unlike `f64::signum`).
fn sign(v: f64) -> i8 {
    if v > 0.0 {
        1
    } else if v < 0.0 {
        -1
    } else {
        0
    }
}

/// Fraction of values whose forecast has the target's sign (0 counts as a sign).
pub fn hit_rate(y: &[f32], p: &[f32]) -> f64 {
    mean_of(
        pairs(y, p).map(|(a, b)| f64::from(u8::from(sign(a) == sign(b)))),
        y.len(),
    )
}

/// Pearson correlation; 0 when undefined (fewer than 2 values, or constant).
pub fn correlation(y: &[f32], p: &[f32]) -> f64 {
    let n = y.len();
    if n < 2 {
        return 0.0;
    }
    let (my, mp) = (
        mean_of(y.iter().map(|&v| f64::from(v)), n),
        mean_of(p.iter().map(|&v| f64::from(v)), n),
    );
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in pairs(y, p) {
        let (da, db) = (a - my, b - mp);
        sxy += da * db;
        sxx += db * db;
        syy += da * da;
    }
    let r = sxy / (sxx * syy).sqrt();
    if r.is_finite() {
        r
    } else {
        0.0
    }
}

/// `QL(y, ŷ, q)` of one value.
fn quantile_loss(y: f64, forecast: f64, q: f64) -> f64 {
    q * (y - forecast).max(0.0) + (1.0 - q) * (forecast - y).max(0.0)
}

/// Mean pinball loss of forecasts of quantile `q` (in (0, 1)).
pub fn pinball_loss(y: &[f32], forecast: &[f32], q: f64) -> f64 {
    mean_of(
        pairs(y, forecast).map(|(a, b)| quantile_loss(a, b, q)),
        y.len(),
    )
}

/// Normalized quantile risk `2·Σ QL / Σ |y|` (the TFT paper's q-risk).
pub fn quantile_risk(y: &[f32], forecast: &[f32], q: f64) -> f64 {
    let scale: f64 = y.iter().map(|&v| f64::from(v).abs()).sum();
    if scale == 0.0 {
        return 0.0;
    }
    2.0 * pairs(y, forecast)
        .map(|(a, b)| quantile_loss(a, b, q))
        .sum::<f64>()
        / scale
}

/// Fraction of values inside `[lower, upper]` (e.g. the P10–P90 band).
pub fn coverage(y: &[f32], lower: &[f32], upper: &[f32]) -> f64 {
    assert_eq!(
        y.len(),
        lower.len(),
        "targets and lower bounds differ in length"
    );
    mean_of(
        pairs(y, upper)
            .zip(lower)
            .map(|((v, hi), &lo)| f64::from(u8::from(f64::from(lo) <= v && v <= hi))),
        y.len(),
    )
}

/// The MSE of each horizon of row-major `[rows × horizons]` values.
pub fn per_horizon_mse(y: &[f32], p: &[f32], horizons: usize) -> Vec<f64> {
    assert!(horizons > 0, "per_horizon_mse with 0 horizons");
    assert_eq!(y.len(), p.len(), "targets and forecasts differ in length");
    let rows = y.len() / horizons;
    (0..horizons)
        .map(|h| {
            mean_of(
                (0..rows).map(|r| {
                    let i = r * horizons + h;
                    (f64::from(p[i]) - f64::from(y[i])).powi(2)
                }),
                rows,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn point_metrics_match_a_hand_computation() {
        let y = [1.0f32, -2.0, 0.5, 0.0];
        let p = [0.5f32, -1.0, -0.5, 0.0];
        let m = point_metrics(&y, &p);
        // Errors 0.5, 1, 1, 0 → squares 0.25, 1, 1, 0.
        assert!(close(m.mse, 2.25 / 4.0), "{m:?}");
        assert!(close(m.mse_zero_forecast, (1.0 + 4.0 + 0.25) / 4.0));
        assert!(close(m.skill, 1.0 - 2.25 / 5.25));
        // Signs agree for 1, -2 and 0 (both zero); not for 0.5.
        assert!(close(m.hit_rate, 0.75));
        // Pearson by hand: means -0.125 and -0.25.
        let (dy, dp) = ([1.125, -1.875, 0.625, 0.125], [0.75, -0.75, -0.25, 0.25]);
        let sxy: f64 = dy.iter().zip(&dp).map(|(a, b)| a * b).sum();
        let sxx: f64 = dp.iter().map(|b| b * b).sum();
        let syy: f64 = dy.iter().map(|a| a * a).sum();
        assert!(close(m.correlation, sxy / (sxx * syy).sqrt()));
        assert_eq!(
            correlation(&[1.0, 1.0], &[2.0, 3.0]),
            0.0,
            "constant targets"
        );
        assert_eq!(skill(1.0, 0.0), 0.0);
        assert_eq!(point_metrics(&[], &[]).mse, 0.0);
    }

    #[test]
    fn quantile_losses_follow_the_tft_definitions() {
        let y = [1.0f32, 2.0, -1.0];
        let f = [0.0f32, 3.0, -1.0];
        // q = 0.9: under-forecast by 1 costs 0.9, over-forecast by 1 costs 0.1.
        assert!(close(pinball_loss(&y, &f, 0.9), (0.9 + 0.1 + 0.0) / 3.0));
        assert!(close(quantile_risk(&y, &f, 0.9), 2.0 * 1.0 / 4.0));
        // The median's pinball loss is half the mean absolute error.
        assert!(close(pinball_loss(&y, &f, 0.5), 0.5 * 2.0 / 3.0));
        assert_eq!(quantile_risk(&[0.0], &[1.0], 0.5), 0.0);
        let lower = [0.5f32, 2.5, -2.0];
        let upper = [1.5f32, 3.0, -1.0];
        assert!(
            close(coverage(&y, &lower, &upper), 2.0 / 3.0),
            "bounds count as inside"
        );
    }

    #[test]
    fn per_horizon_mse_reads_columns_of_row_major_values() {
        // 2 rows × 3 horizons.
        let y = [0.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
        let p = [1.0f32, 0.0, 2.0, 1.0, 3.0, 1.0];
        let by = per_horizon_mse(&y, &p, 3);
        assert_eq!(by, vec![0.5, 2.0, 2.0]);
        let all = mse(&y, &p);
        assert!(close(all, by.iter().sum::<f64>() / 3.0));
    }
}
