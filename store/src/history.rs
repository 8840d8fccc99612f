//! A job's recorded history, for charts (`tli train plot`, `GetTrainingHistory`)
//! and status pages: each task's metric series by step, the reservations held
//! on its devices while it ran, and each device's budget over time.
//!
//! Long series are thinned evenly to at most `max_points` points, keeping the
//! first and the last ([`thin_indices`]): the rows are streamed in step order
//! through the `(task_id, name, step)` index and only the kept ones are
//! copied, so a million-step task costs one index scan and returns a few
//! thousand points. [`Store::metric_series`] reads one task's one metric that
//! way on its own (a sparkline).
//!
//! The budget is the arbiter's, as [`Store::record_budget`] recorded it when a
//! host opened the store (`device_budgets`, schema version 6; stores of older
//! hosts have no rows before that).

use std::collections::BTreeSet;

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use tli_plugin_api::Device;

use super::{int, Store, StoreError};
use tli_core::state::TaskState;
use tli_core::{now_ms, JobId, TaskId};

/// Points per series when a query leaves `max_points` at 0.
pub const DEFAULT_MAX_POINTS: usize = 2000;

/// What to read of a job's history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryQuery {
    /// Only these metric names; empty = every metric the tasks reported.
    pub metrics: Vec<String>,
    /// At most this many points per series (0 = [`DEFAULT_MAX_POINTS`]; at
    /// least 2, the first and the last).
    pub max_points: usize,
}

/// A job's history: its tasks' metric series and its devices' memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobHistory {
    pub job_id: JobId,
    pub name: String,
    pub created_ms: i64,
    /// When the history was read (where a running job's timeline ends).
    pub now_ms: i64,
    /// Every metric name the job's tasks reported, sorted.
    pub metric_names: Vec<String>,
    /// By ordinal.
    pub tasks: Vec<TaskHistory>,
    /// By device name.
    pub devices: Vec<DeviceHistory>,
}

/// One task of a job with its series of the asked-for metrics (by name).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskHistory {
    pub task_id: TaskId,
    pub ordinal: u32,
    pub plugin: String,
    pub asset: String,
    pub device: String,
    pub series: Vec<MetricSeries>,
}

/// One metric of one task by step, as parallel vectors of equal length.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricSeries {
    pub name: String,
    pub steps: Vec<u64>,
    /// NaN where the plugin reported NaN.
    pub values: Vec<f64>,
    pub at_ms: Vec<i64>,
    /// Rows recorded before thinning.
    pub recorded_points: u64,
}

/// A device's memory while a job ran: the budget and the reservations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceHistory {
    pub device: String,
    /// The budget in force when the job started (if recorded), then each
    /// change, oldest first.
    pub budget: Vec<BudgetChange>,
    /// Reservations of this job's tasks and of other jobs' held meanwhile,
    /// oldest first.
    pub reservations: Vec<ReservationSpan>,
}

/// A device's budget from `at_ms` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetChange {
    pub at_ms: i64,
    pub bytes: u64,
}

/// A reservation of a task: what the arbiter reserved, from when to when
/// (`None` while held), with the task's latest measured memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationSpan {
    pub task_id: TaskId,
    pub job_id: JobId,
    pub bytes: u64,
    pub measured_bytes: Option<u64>,
    pub from_ms: i64,
    pub to_ms: Option<i64>,
}

/// The positions (0-based, increasing) of the rows kept when `count` rows
/// are thinned to at most `max_points` (at least 2): all of them when they
/// fit, else evenly spaced ones from the first to the last.
pub fn thin_indices(count: u64, max_points: usize) -> impl Iterator<Item = u64> {
    let max = (max_points.max(2)) as u64;
    let kept = count.min(max);
    (0..kept).map(move |k| {
        if count <= max {
            k
        } else {
            // k·(count−1)/(max−1), exact in 128 bits; strictly increasing
            // because the spacing exceeds 1.
            (u128::from(k) * u128::from(count - 1) / u128::from(max - 1)) as u64
        }
    })
}

impl Store {
    /// Records `device`'s budget now, unless it equals the last one
    /// recorded; true when a row was written.
    pub fn record_budget(&self, device: Device, bytes: u64) -> Result<bool, StoreError> {
        let bytes = int("budget bytes", bytes)?;
        let device = device.to_string();
        let c = self.conn();
        let tx = c.unchecked_transaction()?;
        let last: Option<i64> = tx
            .query_row(
                "SELECT bytes FROM device_budgets WHERE device = ?1 ORDER BY at_ms DESC, id DESC LIMIT 1",
                [&device],
                |r| r.get(0),
            )
            .optional()?;
        if last == Some(bytes) {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO device_budgets (device, bytes, at_ms) VALUES (?1, ?2, ?3)",
            params![device, bytes, now_ms()],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// A device's budget in force at `from_ms` (if any was recorded by then)
    /// and each change up to `to_ms`, oldest first.
    pub fn budget_history(
        &self,
        device: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<BudgetChange>, StoreError> {
        let c = self.reader();
        let read = |r: &rusqlite::Row<'_>| {
            Ok(BudgetChange {
                at_ms: r.get(0)?,
                bytes: r.get(1)?,
            })
        };
        let mut out: Vec<BudgetChange> = c
            .query_row(
                "SELECT at_ms, bytes FROM device_budgets WHERE device = ?1 AND at_ms <= ?2
                 ORDER BY at_ms DESC, id DESC LIMIT 1",
                params![device, from_ms],
                read,
            )
            .optional()?
            .into_iter()
            .collect();
        let mut st = c.prepare(
            "SELECT at_ms, bytes FROM device_budgets WHERE device = ?1 AND at_ms > ?2 AND at_ms <= ?3
             ORDER BY at_ms, id",
        )?;
        for change in st.query_map(params![device, from_ms, to_ms], read)? {
            out.push(change?);
        }
        Ok(out)
    }

    /// The names of the metrics a task reported, sorted.
    pub fn metric_names(&self, task: TaskId) -> Result<Vec<String>, StoreError> {
        let c = self.reader();
        let mut st =
            c.prepare_cached("SELECT name FROM latest_metrics WHERE task_id = ?1 ORDER BY name")?;
        let rows = st.query_map([task], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One metric of a task by step, thinned to at most `max_points` points
    /// (0 = [`DEFAULT_MAX_POINTS`]) keeping the first and the last. Empty
    /// (not an error) for a name the task never reported.
    pub fn metric_series(
        &self,
        task: TaskId,
        name: &str,
        max_points: usize,
    ) -> Result<MetricSeries, StoreError> {
        let max_points = match max_points {
            0 => DEFAULT_MAX_POINTS,
            n => n,
        };
        let c = self.reader();
        // One snapshot for the count and the rows.
        let tx = c.unchecked_transaction()?;
        let count: i64 = tx.query_row(
            "SELECT COUNT(*) FROM metrics WHERE task_id = ?1 AND name = ?2",
            params![task, name],
            |r| r.get(0),
        )?;
        let count = u64::try_from(count).unwrap_or(0);
        let mut series = MetricSeries {
            name: name.to_string(),
            recorded_points: count,
            ..MetricSeries::default()
        };
        let mut keep = thin_indices(count, max_points).peekable();
        {
            let mut st = tx.prepare_cached(
                "SELECT step, value, at_ms FROM metrics WHERE task_id = ?1 AND name = ?2
                 ORDER BY step, rowid",
            )?;
            let mut rows = st.query(params![task, name])?;
            let mut index = 0u64;
            while let Some(&want) = keep.peek() {
                let Some(row) = rows.next()? else { break };
                if index == want {
                    series.steps.push(row.get(0)?);
                    series
                        .values
                        .push(row.get::<_, Option<f64>>(1)?.unwrap_or(f64::NAN));
                    series.at_ms.push(row.get(2)?);
                    keep.next();
                }
                index += 1;
            }
        }
        tx.finish()?;
        Ok(series)
    }

    /// Reservations on `device` that overlap `from_ms ..= to_ms`, and every
    /// reservation of `job`'s tasks on it, oldest first, with each task's
    /// latest measured bytes.
    pub fn reservation_spans(
        &self,
        device: &str,
        job: JobId,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<ReservationSpan>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(
            "SELECT r.task_id, t.job_id, r.bytes, t.measured_bytes, r.reserved_ms, r.released_ms
             FROM reservations r JOIN tasks t ON t.id = r.task_id
             WHERE r.device = ?1 AND (t.job_id = ?2
                 OR (r.reserved_ms <= ?4 AND COALESCE(r.released_ms, ?4) >= ?3))
             ORDER BY r.reserved_ms, r.id",
        )?;
        let rows = st.query_map(params![device, job, from_ms, to_ms], |r| {
            Ok(ReservationSpan {
                task_id: r.get(0)?,
                job_id: r.get(1)?,
                bytes: r.get(2)?,
                measured_bytes: r.get(3)?,
                from_ms: r.get(4)?,
                to_ms: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A job's history (see the module documentation); `None` for an
    /// unknown job. Each series is read on its own (a read connection held
    /// only for it), so other reads are not kept waiting for the whole job.
    pub fn job_history(
        &self,
        job: JobId,
        query: &HistoryQuery,
    ) -> Result<Option<JobHistory>, StoreError> {
        let Some(row) = self.job(job)? else {
            return Ok(None);
        };
        let now = now_ms();
        let tasks = self.tasks_of(job)?;
        let mut metric_names = BTreeSet::new();
        let mut histories = Vec::with_capacity(tasks.len());
        for task in &tasks {
            let names = self.metric_names(task.id)?;
            let mut series = Vec::new();
            for name in &names {
                if query.metrics.is_empty() || query.metrics.contains(name) {
                    series.push(self.metric_series(task.id, name, query.max_points)?);
                }
            }
            metric_names.extend(names);
            histories.push(TaskHistory {
                task_id: task.id,
                ordinal: task.ordinal,
                plugin: task.plugin.clone(),
                asset: task.asset.clone(),
                device: task.device.to_string(),
                series,
            });
        }

        // The job's time span: from its creation to now while anything of
        // it may still run, else to its last change.
        let live = tasks.iter().any(|t| {
            matches!(
                t.state,
                TaskState::Queued | TaskState::Running | TaskState::Checkpointing
            )
        });
        let last_change = tasks
            .iter()
            .map(|t| t.updated_ms)
            .max()
            .unwrap_or(row.created_ms);
        let end = if live { now } else { last_change.min(now) };
        let devices: BTreeSet<String> = tasks.iter().map(|t| t.device.to_string()).collect();
        let mut device_histories = Vec::with_capacity(devices.len());
        for device in devices {
            let reservations = self.reservation_spans(&device, job, row.created_ms, end)?;
            let until = reservations
                .iter()
                .filter(|r| r.job_id == job)
                .map(|r| r.to_ms.unwrap_or(now))
                .fold(end, i64::max);
            device_histories.push(DeviceHistory {
                budget: self.budget_history(&device, row.created_ms, until)?,
                device,
                reservations,
            });
        }
        Ok(Some(JobHistory {
            job_id: row.id,
            name: row.name,
            created_ms: row.created_ms,
            now_ms: now,
            metric_names: metric_names.into_iter().collect(),
            tasks: histories,
            devices: device_histories,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewTask, SliceMetrics};

    fn thin(count: u64, max: usize) -> Vec<u64> {
        thin_indices(count, max).collect()
    }

    #[test]
    fn thinning_keeps_first_and_last_evenly() {
        assert_eq!(thin(0, 10), Vec::<u64>::new());
        assert_eq!(thin(1, 10), vec![0]);
        assert_eq!(thin(5, 10), vec![0, 1, 2, 3, 4]);
        assert_eq!(thin(10, 10), (0..10).collect::<Vec<_>>());
        assert_eq!(thin(11, 3), vec![0, 5, 10]);
        assert_eq!(thin(100, 5), vec![0, 24, 49, 74, 99]);
        // At least the first and the last, whatever was asked.
        assert_eq!(thin(7, 0), vec![0, 6]);
        assert_eq!(thin(7, 1), vec![0, 6]);
        let big = thin(1_000_000, 2000);
        assert_eq!(big.len(), 2000);
        assert_eq!((big[0], big[1999]), (0, 999_999));
        assert!(big.windows(2).all(|w| w[0] < w[1]));
        let gaps: Vec<u64> = big.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|&g| g == 500 || g == 501), "even spacing");
        // No overflow near the top of the range.
        let top = thin(u64::MAX, 3);
        assert_eq!(top, vec![0, u64::MAX / 2, u64::MAX - 1]);
    }

    fn task(plugin: &str, asset: &str) -> NewTask {
        NewTask {
            plugin: plugin.into(),
            asset: asset.into(),
            config_json: "{}".into(),
            seed: 1,
            total_steps: 1000,
            priority: 0,
            device: Device::Cpu,
            estimate_bytes: 1 << 20,
            cost_weight: 1.0,
            plugin_version: None,
            plugin_checksum: None,
            model_card: None,
        }
    }

    fn metrics(values: &[(&str, f64)]) -> Vec<(String, f64)> {
        values.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn metric_series_are_read_by_step_and_thinned() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (_, ids) = store
            .create_job("j", "{}", &[task("template", "A")])
            .unwrap();
        let batch: Vec<SliceMetrics> = (1..=1000u64)
            .map(|s| {
                let mut m = metrics(&[("loss", 1.0 / s as f64)]);
                if s % 100 == 0 {
                    m.push(("val".into(), if s == 500 { f64::NAN } else { s as f64 }));
                }
                SliceMetrics::now(s, m)
            })
            .collect();
        store.record_progress_batch(ids[0], 1000, &batch).unwrap();

        let loss = store.metric_series(ids[0], "loss", 50).unwrap();
        assert_eq!(loss.recorded_points, 1000);
        assert_eq!(loss.steps.len(), 50);
        assert_eq!((loss.steps[0], loss.steps[49]), (1, 1000));
        assert_eq!(loss.values.len(), 50);
        assert_eq!(loss.at_ms.len(), 50);
        assert_eq!(loss.values[49], 1.0 / 1000.0);
        let all = store.metric_series(ids[0], "loss", 0).unwrap();
        assert_eq!(all.steps, (1..=1000).collect::<Vec<u64>>());

        let val = store.metric_series(ids[0], "val", 0).unwrap();
        assert_eq!(val.steps, (1..=10).map(|k| k * 100).collect::<Vec<_>>());
        assert!(val.values[4].is_nan(), "NaN comes back as NaN");
        let none = store.metric_series(ids[0], "missing", 10).unwrap();
        assert_eq!((none.recorded_points, none.steps.len()), (0, 0));
        assert_eq!(store.metric_names(ids[0]).unwrap(), ["loss", "val"]);
    }

    #[test]
    fn budgets_are_recorded_on_change_and_read_for_a_window() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(store.record_budget(Device::Cpu, 100).unwrap());
        assert!(!store.record_budget(Device::Cpu, 100).unwrap(), "unchanged");
        assert!(store.record_budget(Device::Cuda(0), 500).unwrap());
        assert!(store.record_budget(Device::Cpu, 200).unwrap());
        // Spread the rows out in time: 1000, 2000 (cpu) and 1500 (cuda:0).
        store
            .conn()
            .execute_batch(
                "UPDATE device_budgets SET at_ms = 1000 WHERE device = 'cpu' AND bytes = 100;
                 UPDATE device_budgets SET at_ms = 2000 WHERE device = 'cpu' AND bytes = 200;
                 UPDATE device_budgets SET at_ms = 1500 WHERE device = 'cuda:0';",
            )
            .unwrap();
        let b = |at_ms, bytes| BudgetChange { at_ms, bytes };
        assert_eq!(
            store.budget_history("cpu", 1200, 3000).unwrap(),
            [b(1000, 100), b(2000, 200)]
        );
        assert_eq!(
            store.budget_history("cpu", 500, 1500).unwrap(),
            [b(1000, 100)]
        );
        assert_eq!(
            store.budget_history("cpu", 2500, 3000).unwrap(),
            [b(2000, 200)]
        );
        assert_eq!(
            store.budget_history("cuda:0", 0, 9000).unwrap(),
            [b(1500, 500)]
        );
        assert!(store.budget_history("cuda:1", 0, 9000).unwrap().is_empty());
    }

    #[test]
    fn job_history_has_series_spans_and_budgets() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.record_budget(Device::Cpu, 10 << 20).unwrap();
        let (other_job, other) = store.create_job("other", "{}", &[task("x", "Z")]).unwrap();
        let (job, ids) = store
            .create_job("mine", "{}", &[task("template", "A"), task("dqn", "B")])
            .unwrap();
        store
            .record_progress(ids[0], 10, &metrics(&[("loss", 1.0), ("skill", 0.1)]))
            .unwrap();
        store
            .record_progress(ids[0], 20, &metrics(&[("loss", 0.5)]))
            .unwrap();
        store
            .record_progress(ids[1], 5, &metrics(&[("return", 3.0)]))
            .unwrap();
        store.set_measured_bytes(ids[0], 3 << 20).unwrap();
        let r0 = store.reserve(ids[0], Device::Cpu, 4 << 20).unwrap();
        let r1 = store.reserve(ids[1], Device::Cpu, 2 << 20).unwrap();
        let r2 = store.reserve(other[0], Device::Cpu, 1 << 20).unwrap();
        store.release(r0).unwrap();
        for (r, from, to) in [
            (r0, 1000, Some(5000)),
            (r1, 2000, None),
            (r2, 1500, Some(1800)),
        ] {
            store
                .conn()
                .execute(
                    "UPDATE reservations SET reserved_ms = ?2, released_ms = ?3 WHERE id = ?1",
                    params![r, from, to],
                )
                .unwrap();
        }
        store
            .conn()
            .execute_batch(
                "UPDATE jobs SET created_ms = 900; UPDATE device_budgets SET at_ms = 100;",
            )
            .unwrap();

        let h = store
            .job_history(job, &HistoryQuery::default())
            .unwrap()
            .unwrap();
        assert_eq!((h.job_id, h.name.as_str()), (job, "mine"));
        assert_eq!(h.metric_names, ["loss", "return", "skill"]);
        assert_eq!(h.tasks.len(), 2);
        let t0 = &h.tasks[0];
        assert_eq!(
            (t0.ordinal, t0.plugin.as_str(), t0.asset.as_str()),
            (0, "template", "A")
        );
        let names: Vec<&str> = t0.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["loss", "skill"]);
        assert_eq!(t0.series[0].steps, [10, 20]);
        assert_eq!(t0.series[0].values, [1.0, 0.5]);
        assert_eq!(h.tasks[1].series[0].name, "return");

        assert_eq!(h.devices.len(), 1);
        let cpu = &h.devices[0];
        assert_eq!(cpu.device, "cpu");
        assert_eq!(
            cpu.budget,
            [BudgetChange {
                at_ms: 100,
                bytes: 10 << 20
            }]
        );
        let span = |task_id, job_id, bytes, measured_bytes, from_ms, to_ms| ReservationSpan {
            task_id,
            job_id,
            bytes,
            measured_bytes,
            from_ms,
            to_ms,
        };
        assert_eq!(
            cpu.reservations,
            [
                span(ids[0], job, 4 << 20, Some(3 << 20), 1000, Some(5000)),
                span(other[0], other_job, 1 << 20, None, 1500, Some(1800)),
                span(ids[1], job, 2 << 20, None, 2000, None),
            ]
        );

        // Only the asked-for metrics, thinned.
        let only = store
            .job_history(
                job,
                &HistoryQuery {
                    metrics: vec!["loss".into()],
                    max_points: 1,
                },
            )
            .unwrap()
            .unwrap();
        assert_eq!(only.metric_names, ["loss", "return", "skill"]);
        assert_eq!(only.tasks[0].series.len(), 1);
        assert_eq!(only.tasks[0].series[0].steps, [10, 20]);
        assert!(only.tasks[1].series.is_empty());

        assert_eq!(
            store.job_history(999, &HistoryQuery::default()).unwrap(),
            None
        );
    }
}
