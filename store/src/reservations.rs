//! Device memory reservations: recording that a task holds memory on a
//! device, releasing it, and listing the open ones or all of them.

use rusqlite::{params, OptionalExtension};
use tli_plugin_api::Device;

use super::jobs::task_exists;
use super::rows::reservation_from_row;
use super::schema::RESERVATION_COLUMNS;
use super::{int, ReservationRow, Store, StoreError};
use tli_core::{now_ms, TaskId};

impl Store {
    /// Records that a task holds `bytes` of `device` memory; returns the
    /// reservation id.
    pub fn reserve(&self, task: TaskId, device: Device, bytes: u64) -> Result<i64, StoreError> {
        let bytes = int("reserved bytes", bytes)?;
        let c = self.conn();
        task_exists(&c, task)?;
        c.execute(
            "INSERT INTO reservations (task_id, device, bytes, reserved_ms) VALUES (?1, ?2, ?3, ?4)",
            params![task, device.to_string(), bytes, now_ms()],
        )?;
        Ok(c.last_insert_rowid())
    }

    /// Closes a reservation. Releasing one that is already closed does
    /// nothing (its first release time stays); an unknown id is an error.
    pub fn release(&self, reservation: i64) -> Result<(), StoreError> {
        let c = self.conn();
        let changed = c.execute(
            "UPDATE reservations SET released_ms = ?2 WHERE id = ?1 AND released_ms IS NULL",
            params![reservation, now_ms()],
        )?;
        if changed == 0 {
            c.query_row(
                "SELECT 1 FROM reservations WHERE id = ?1",
                [reservation],
                |_| Ok(()),
            )
            .optional()?
            .ok_or(StoreError::NoSuchReservation(reservation))?;
        }
        Ok(())
    }

    /// The reservations not yet released, by id.
    pub fn open_reservations(&self) -> Result<Vec<ReservationRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(&format!(
            "SELECT {RESERVATION_COLUMNS} FROM reservations WHERE released_ms IS NULL ORDER BY id"
        ))?;
        let rows = st.query_map([], reservation_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every reservation ever made, by id.
    pub fn reservation_timeline(&self) -> Result<Vec<ReservationRow>, StoreError> {
        let c = self.reader();
        let mut st = c.prepare(&format!(
            "SELECT {RESERVATION_COLUMNS} FROM reservations ORDER BY id"
        ))?;
        let rows = st.query_map([], reservation_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
