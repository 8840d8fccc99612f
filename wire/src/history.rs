//! `GetTrainingHistory` on the wire: the request as a [`HistoryQuery`], a
//! [`JobHistory`] as the response, and back (what `tli train plot` draws
//! from). Ids, times and sizes convert losslessly; series arrays of unequal
//! length from a foreign server are cut to the shortest.

use crate::convert::{id_to_proto, invalid};
use tli_proto::v1 as pb;
use tli_store::{
    BudgetChange, DeviceHistory, HistoryQuery, JobHistory, MetricSeries, ReservationSpan,
    TaskHistory, DEFAULT_MAX_POINTS,
};
use tonic::Status;

/// The most points per series a request may ask for.
pub const MAX_POINTS_PER_SERIES: u32 = 100_000;

/// The store's query from a request: `max_points_per_series` 0 → the
/// default, above [`MAX_POINTS_PER_SERIES`] INVALID_ARGUMENT.
pub fn history_query(req: &pb::GetTrainingHistoryRequest) -> Result<HistoryQuery, Status> {
    let max_points = match req.max_points_per_series {
        0 => DEFAULT_MAX_POINTS,
        n if n <= MAX_POINTS_PER_SERIES => n as usize,
        n => {
            return Err(invalid(format!(
                "max_points_per_series: {n} is outside 1..={MAX_POINTS_PER_SERIES} (0 = {DEFAULT_MAX_POINTS})"
            )))
        }
    };
    if let Some(i) = req.metrics.iter().position(|m| m.trim().is_empty()) {
        return Err(invalid(format!("metrics[{i}]: a metric name is required")));
    }
    Ok(HistoryQuery {
        metrics: req.metrics.clone(),
        max_points,
    })
}

/// Store ids on the wire are positive; 0 and beyond-range read as 0.
fn id_from_proto(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(0)
}

/// A job's history as the response.
pub fn history_to_proto(h: &JobHistory) -> pb::GetTrainingHistoryResponse {
    pb::GetTrainingHistoryResponse {
        job_id: id_to_proto(h.job_id),
        name: h.name.clone(),
        created_unix_ms: h.created_ms,
        now_unix_ms: h.now_ms,
        metric_names: h.metric_names.clone(),
        tasks: h
            .tasks
            .iter()
            .map(|t| pb::TaskHistory {
                task_id: id_to_proto(t.task_id),
                ordinal: t.ordinal,
                plugin: t.plugin.clone(),
                asset: t.asset.clone(),
                device: t.device.clone(),
                series: t
                    .series
                    .iter()
                    .map(|s| pb::MetricSeries {
                        name: s.name.clone(),
                        steps: s.steps.clone(),
                        values: s.values.clone(),
                        at_unix_ms: s.at_ms.clone(),
                        recorded_points: s.recorded_points,
                    })
                    .collect(),
            })
            .collect(),
        devices: h
            .devices
            .iter()
            .map(|d| pb::DeviceMemoryHistory {
                device: d.device.clone(),
                budget: d
                    .budget
                    .iter()
                    .map(|b| pb::BudgetChange {
                        at_unix_ms: b.at_ms,
                        budget_bytes: b.bytes,
                    })
                    .collect(),
                reservations: d
                    .reservations
                    .iter()
                    .map(|r| pb::ReservationSpan {
                        task_id: id_to_proto(r.task_id),
                        job_id: id_to_proto(r.job_id),
                        reserved_bytes: r.bytes,
                        measured_bytes: r.measured_bytes,
                        from_unix_ms: r.from_ms,
                        to_unix_ms: r.to_ms.unwrap_or(0),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// A response as a job's history (the client's side).
pub fn history_from_proto(r: &pb::GetTrainingHistoryResponse) -> JobHistory {
    JobHistory {
        job_id: id_from_proto(r.job_id),
        name: r.name.clone(),
        created_ms: r.created_unix_ms,
        now_ms: r.now_unix_ms,
        metric_names: r.metric_names.clone(),
        tasks: r
            .tasks
            .iter()
            .map(|t| TaskHistory {
                task_id: id_from_proto(t.task_id),
                ordinal: t.ordinal,
                plugin: t.plugin.clone(),
                asset: t.asset.clone(),
                device: t.device.clone(),
                series: t.series.iter().map(series_from_proto).collect(),
            })
            .collect(),
        devices: r
            .devices
            .iter()
            .map(|d| DeviceHistory {
                device: d.device.clone(),
                budget: d
                    .budget
                    .iter()
                    .map(|b| BudgetChange {
                        at_ms: b.at_unix_ms,
                        bytes: b.budget_bytes,
                    })
                    .collect(),
                reservations: d
                    .reservations
                    .iter()
                    .map(|s| ReservationSpan {
                        task_id: id_from_proto(s.task_id),
                        job_id: id_from_proto(s.job_id),
                        bytes: s.reserved_bytes,
                        measured_bytes: s.measured_bytes,
                        from_ms: s.from_unix_ms,
                        to_ms: (s.to_unix_ms != 0).then_some(s.to_unix_ms),
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn series_from_proto(s: &pb::MetricSeries) -> MetricSeries {
    let n = s.steps.len().min(s.values.len());
    // `at_unix_ms` may be left out by a minimal server: zeros then.
    let mut at_ms: Vec<i64> = s.at_unix_ms.iter().copied().take(n).collect();
    at_ms.resize(n, 0);
    MetricSeries {
        name: s.name.clone(),
        steps: s.steps[..n].to_vec(),
        values: s.values[..n].to_vec(),
        at_ms,
        recorded_points: s.recorded_points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> JobHistory {
        JobHistory {
            job_id: 7,
            name: "sweep".into(),
            created_ms: 1_000,
            now_ms: 9_000,
            metric_names: vec!["loss".into(), "return".into()],
            tasks: vec![TaskHistory {
                task_id: 3,
                ordinal: 0,
                plugin: "template".into(),
                asset: "ES".into(),
                device: "cpu".into(),
                series: vec![MetricSeries {
                    name: "loss".into(),
                    steps: vec![1, 5],
                    values: vec![2.0, 0.5],
                    at_ms: vec![1_100, 1_500],
                    recorded_points: 5,
                }],
            }],
            devices: vec![DeviceHistory {
                device: "cpu".into(),
                budget: vec![BudgetChange {
                    at_ms: 500,
                    bytes: 1 << 30,
                }],
                reservations: vec![
                    ReservationSpan {
                        task_id: 3,
                        job_id: 7,
                        bytes: 1 << 20,
                        measured_bytes: Some(900_000),
                        from_ms: 1_050,
                        to_ms: Some(2_000),
                    },
                    ReservationSpan {
                        task_id: 4,
                        job_id: 8,
                        bytes: 1 << 21,
                        measured_bytes: None,
                        from_ms: 1_800,
                        to_ms: None,
                    },
                ],
            }],
        }
    }

    #[test]
    fn a_history_survives_the_wire() {
        let h = history();
        assert_eq!(history_from_proto(&history_to_proto(&h)), h);
    }

    #[test]
    fn ragged_series_are_cut_to_the_shortest() {
        let mut wire = history_to_proto(&history());
        wire.tasks[0].series[0].values.pop();
        wire.tasks[0].series[0].at_unix_ms.clear();
        let s = &history_from_proto(&wire).tasks[0].series[0];
        assert_eq!(
            (s.steps.as_slice(), s.values.as_slice()),
            (&[1][..], &[2.0][..])
        );
        assert_eq!(s.at_ms, [0]);
    }

    #[test]
    fn requests_are_checked() {
        let q = history_query(&pb::GetTrainingHistoryRequest {
            job_id: 1,
            ..Default::default()
        })
        .unwrap();
        assert_eq!((q.max_points, q.metrics.len()), (DEFAULT_MAX_POINTS, 0));
        let e = history_query(&pb::GetTrainingHistoryRequest {
            job_id: 1,
            max_points_per_series: MAX_POINTS_PER_SERIES + 1,
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            e.message().starts_with("max_points_per_series: "),
            "{}",
            e.message()
        );
        let e = history_query(&pb::GetTrainingHistoryRequest {
            job_id: 1,
            metrics: vec!["loss".into(), " ".into()],
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.message().starts_with("metrics[1]: "), "{}", e.message());
    }
}
