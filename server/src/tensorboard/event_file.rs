//! TensorBoard's event file format, written from scratch: the TFRecord
//! framing of each record, the few protobuf messages TensorBoard reads
//! (declared by hand with `prost`, no protoc), and a writer of one
//! `events.out.tfevents.*` file.
//!
//! A record is `u64 length (LE) | u32 masked crc32c of those 8 bytes (LE) |
//! data | u32 masked crc32c of the data (LE)`; the data is one serialized
//! [`Event`]. The first event of a file carries the file version
//! `brain.Event:2`; every later one a [`Summary`] (scalars, text) or a
//! [`SessionLog`]. The field numbers follow TensorBoard's own
//! `event.proto`, `summary.proto`, `tensor.proto` and `tensor_shape.proto`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The file version TensorBoard expects in a file's first event. Version 2
/// also tells readers that a [`SessionLog`] `START` marks a restart.
pub const FILE_VERSION: &str = "brain.Event:2";
/// `DataType.DT_STRING` of TensorFlow's `types.proto`.
pub const DT_STRING: i32 = 7;
/// `DataClass.DATA_CLASS_TENSOR` of `summary.proto`.
pub const DATA_CLASS_TENSOR: i32 = 2;
/// `SessionLog.SessionStatus.START`.
pub const SESSION_START: i32 = 1;
/// The plugin that shows string tensors as (markdown) text.
pub const TEXT_PLUGIN: &str = "text";
/// The HParams dashboard's plugin, its data version and a run's tag.
pub const HPARAMS_PLUGIN: &str = "hparams";
pub const HPARAMS_DATA_VERSION: i32 = 0;
pub const SESSION_START_INFO_TAG: &str = "_hparams_/session_start_info";
/// `DataType.DT_FLOAT`.
pub const DT_FLOAT: i32 = 1;

/// Why an event file could not be written (or a record not read back).
#[derive(Debug, thiserror::Error)]
pub enum EventFileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("record at byte {offset}: {what}")]
    Corrupt { offset: usize, what: &'static str },
}

/// `tensorboard.Event`: one record of an event file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// Seconds since the Unix epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(oneof = "event::What", tags = "3, 5, 7")]
    pub what: Option<event::What>,
}

/// The oneof of [`Event`].
pub mod event {
    /// What an [`Event`](super::Event) carries.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum What {
        #[prost(string, tag = "3")]
        FileVersion(String),
        #[prost(message, tag = "5")]
        Summary(super::Summary),
        #[prost(message, tag = "7")]
        SessionLog(super::SessionLog),
    }
}

/// `tensorboard.SessionLog`: a `START` at step N tells readers that the
/// run restarted there, so values they hold at steps ≥ N are stale.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionLog {
    #[prost(int32, tag = "1")]
    pub status: i32,
    #[prost(string, tag = "2")]
    pub checkpoint_path: String,
    #[prost(string, tag = "3")]
    pub msg: String,
}

/// `tensorboard.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorboard.Summary.Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryValue {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    #[prost(oneof = "summary_value::Value", tags = "2, 8")]
    pub value: Option<summary_value::Value>,
}

/// The oneof of [`SummaryValue`].
pub mod summary_value {
    /// A scalar or a tensor.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(float, tag = "2")]
        SimpleValue(f32),
        #[prost(message, tag = "8")]
        Tensor(super::TensorProto),
    }
}

/// `tensorboard.SummaryMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
    #[prost(int32, tag = "4")]
    pub data_class: i32,
}

/// `tensorboard.SummaryMetadata.PluginData`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// `tensorboard.TensorProto`: strings, or an empty float tensor.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// Present without dimensions: a scalar.
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

/// `tensorboard.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<TensorShapeDim>,
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

/// `tensorboard.TensorShapeProto.Dim`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeDim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

/// `tensorboard.hparams.HParamsPluginData`, the session-start case.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HParamsPluginData {
    #[prost(int32, tag = "1")]
    pub version: i32,
    #[prost(message, optional, tag = "3")]
    pub session_start_info: Option<SessionStartInfo>,
}

/// `tensorboard.hparams.SessionStartInfo`: one run's hyperparameters.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionStartInfo {
    #[prost(btree_map = "string, message", tag = "1")]
    pub hparams: std::collections::BTreeMap<String, HParamValue>,
    #[prost(string, tag = "4")]
    pub group_name: String,
    #[prost(double, tag = "5")]
    pub start_time_secs: f64,
}

/// `google.protobuf.Value`: a number, a string or a boolean.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HParamValue {
    #[prost(oneof = "h_param_value::Kind", tags = "2, 3, 4")]
    pub kind: Option<h_param_value::Kind>,
}

/// The oneof of [`HParamValue`].
pub mod h_param_value {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(double, tag = "2")]
        NumberValue(f64),
        #[prost(string, tag = "3")]
        StringValue(String),
        #[prost(bool, tag = "4")]
        BoolValue(bool),
    }
}

impl Event {
    /// Scalars at `step`, one value per `(tag, value)`.
    pub fn scalars(wall_time: f64, step: i64, scalars: &[(String, f32)]) -> Self {
        let value = scalars
            .iter()
            .map(|(tag, v)| SummaryValue {
                tag: tag.clone(),
                metadata: None,
                value: Some(summary_value::Value::SimpleValue(*v)),
            })
            .collect();
        Self::summary(wall_time, step, Summary { value })
    }

    /// A text summary (markdown) under `tag`.
    pub fn text(wall_time: f64, step: i64, tag: &str, text: &str) -> Self {
        let value = SummaryValue {
            tag: tag.to_string(),
            metadata: Some(SummaryMetadata {
                plugin_data: Some(PluginData {
                    plugin_name: TEXT_PLUGIN.to_string(),
                    content: Vec::new(),
                }),
                data_class: DATA_CLASS_TENSOR,
            }),
            value: Some(summary_value::Value::Tensor(TensorProto {
                dtype: DT_STRING,
                tensor_shape: Some(TensorShapeProto::default()),
                string_val: vec![text.as_bytes().to_vec()],
            })),
        };
        Self::summary(wall_time, step, Summary { value: vec![value] })
    }

    /// A run's hyperparameters for the HParams dashboard (a session start
    /// in `group`), as TensorBoard's own `hparams` summary writes them.
    pub fn hparams(
        wall_time: f64,
        step: i64,
        hparams: std::collections::BTreeMap<String, HParamValue>,
        group: &str,
    ) -> Self {
        use prost::Message;
        let data = HParamsPluginData {
            version: HPARAMS_DATA_VERSION,
            session_start_info: Some(SessionStartInfo {
                hparams,
                group_name: group.to_string(),
                start_time_secs: wall_time,
            }),
        };
        let value = SummaryValue {
            tag: SESSION_START_INFO_TAG.to_string(),
            metadata: Some(SummaryMetadata {
                plugin_data: Some(PluginData {
                    plugin_name: HPARAMS_PLUGIN.to_string(),
                    content: data.encode_to_vec(),
                }),
                data_class: 0,
            }),
            value: Some(summary_value::Value::Tensor(TensorProto {
                dtype: DT_FLOAT,
                tensor_shape: Some(TensorShapeProto {
                    dim: vec![TensorShapeDim { size: 0 }],
                    unknown_rank: false,
                }),
                string_val: Vec::new(),
            })),
        };
        Self::summary(wall_time, step, Summary { value: vec![value] })
    }

    /// A restart at `step`: readers drop what they hold at steps ≥ `step`.
    pub fn session_start(wall_time: f64, step: i64) -> Self {
        Self {
            wall_time,
            step,
            what: Some(event::What::SessionLog(SessionLog {
                status: SESSION_START,
                ..Default::default()
            })),
        }
    }

    fn summary(wall_time: f64, step: i64, summary: Summary) -> Self {
        Self {
            wall_time,
            step,
            what: Some(event::What::Summary(summary)),
        }
    }
}

/// Now, in seconds since the Unix epoch (an event's wall time).
pub fn wall_time_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// CRC-32C (Castagnoli) of `data`, masked as TFRecord stores it: rotated
/// right by 15 bits, plus a constant (a CRC of data holding CRCs is weak).
pub fn masked_crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

/// Appends `data` framed as one TFRecord to `out`.
pub fn frame_record(data: &[u8], out: &mut Vec<u8>) {
    let length = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
}

/// Every record's data in `bytes` (a whole event file), both checksums checked.
pub fn read_records(bytes: &[u8]) -> Result<Vec<Vec<u8>>, EventFileError> {
    let mut records = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let corrupt = |what| EventFileError::Corrupt { offset, what };
        let header = bytes
            .get(offset..offset + 12)
            .ok_or(corrupt("short header"))?;
        let (length, length_crc) = header.split_at(8);
        if masked_crc32c(length).to_le_bytes() != length_crc {
            return Err(corrupt("length checksum"));
        }
        let mut length_le = [0u8; 8];
        length_le.copy_from_slice(length);
        let length = usize::try_from(u64::from_le_bytes(length_le))
            .map_err(|_| corrupt("length too large"))?;
        let start = offset + 12;
        let end = start
            .checked_add(length)
            .filter(|end| end.saturating_add(4) <= bytes.len())
            .ok_or(corrupt("short data"))?;
        let data = &bytes[start..end];
        if masked_crc32c(data).to_le_bytes() != bytes[end..end + 4] {
            return Err(corrupt("data checksum"));
        }
        records.push(data.to_vec());
        offset = end + 4;
    }
    Ok(records)
}

/// Makes file names unique within this process (two files of one task
/// directory opened in the same second).
static FILE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// This machine's name for event file names (`localhost` if unknown).
fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

/// One open event file: `events.out.tfevents.<unix secs>.<host>.<pid>.<n>`
/// in its directory. Writes are buffered until [`flush`](Self::flush).
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
    record: Vec<u8>,
}

impl EventWriter {
    /// Creates `dir` if needed and a new event file in it, starting with
    /// the file version event.
    pub fn create(dir: &Path) -> Result<Self, EventFileError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| EventFileError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let wall_time = wall_time_now();
        let name = format!(
            "events.out.tfevents.{}.{}.{}.{}",
            wall_time as u64,
            hostname(),
            std::process::id(),
            FILE_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io(&path))?;
        let mut writer = Self {
            path,
            out: BufWriter::new(file),
            record: Vec::new(),
        };
        writer.write(&Event {
            wall_time,
            step: 0,
            what: Some(event::What::FileVersion(FILE_VERSION.into())),
        })?;
        writer.flush()?;
        Ok(writer)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event (buffered).
    pub fn write(&mut self, event: &Event) -> Result<(), EventFileError> {
        use prost::Message;
        self.record.clear();
        frame_record(&event.encode_to_vec(), &mut self.record);
        self.out
            .write_all(&self.record)
            .map_err(|source| EventFileError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Hands everything written so far to the file (no fsync: a crash may
    /// lose the last events, never training).
    pub fn flush(&mut self) -> Result<(), EventFileError> {
        self.out.flush().map_err(|source| EventFileError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// CRC-32C bit by bit (reflected polynomial 0x82F63B78), to check the crate against.
    fn crc32c_bitwise(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0x82f6_3b78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    /// TFRecord's mask as its format description writes it (on purpose not `rotate_right`).
    #[allow(clippy::manual_rotate)]
    fn mask(crc: u32) -> u32 {
        ((crc >> 15) | (crc << 17)).wrapping_add(0xa282_ead8)
    }

    #[test]
    fn masked_crc32c_matches_known_vectors() {
        // The CRC-32C check value of "123456789" (RFC 3720, appendix B.4).
        assert_eq!(crc32c_bitwise(b"123456789"), 0xe306_9283);
        for data in [&b""[..], b"a", b"123456789", &24u64.to_le_bytes()] {
            assert_eq!(masked_crc32c(data), mask(crc32c_bitwise(data)), "{data:?}");
        }
        // The same values from tensorboard's own masked_crc32c (Python).
        assert_eq!(masked_crc32c(b""), 0xa282_ead8);
        assert_eq!(masked_crc32c(b"a"), 0x28e4_6e78);
        assert_eq!(masked_crc32c(b"123456789"), 0xc78a_b0e5);
        assert_eq!(masked_crc32c(&24u64.to_le_bytes()), 0x224b_7fa3);
    }

    #[test]
    fn a_framed_record_has_length_checksums_and_data() {
        let mut out = Vec::new();
        frame_record(b"abc", &mut out);
        assert_eq!(out.len(), 8 + 4 + 3 + 4);
        assert_eq!(&out[..8], &3u64.to_le_bytes());
        assert_eq!(
            &out[8..12],
            &masked_crc32c(&3u64.to_le_bytes()).to_le_bytes()
        );
        assert_eq!(&out[12..15], b"abc");
        assert_eq!(&out[15..], &masked_crc32c(b"abc").to_le_bytes());
    }

    #[test]
    fn records_read_back_and_damage_is_found() {
        let mut out = Vec::new();
        for data in [&b""[..], b"one", &[7u8; 300]] {
            frame_record(data, &mut out);
        }
        let records = read_records(&out).expect("read");
        assert_eq!(records, vec![vec![], b"one".to_vec(), vec![7u8; 300]]);
        let mut damaged = out.clone();
        damaged[14] ^= 1; // inside the second record's length
        assert!(read_records(&damaged).is_err());
        let mut damaged = out.clone();
        damaged[8 + 4 + 4 + 12] ^= 1; // the second record's data
        assert!(read_records(&damaged).is_err());
        assert!(read_records(&out[..out.len() - 1]).is_err(), "truncated");
    }

    /// The bytes Python's protobuf serializes for the same events
    /// (tensorboard.compat.proto.event_pb2, printed with `.hex()`).
    #[test]
    fn events_encode_as_tensorboards_own_protos() {
        let hex = |e: &Event| {
            e.encode_to_vec()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let scalar = Event::scalars(1.5, 3, &[("a/b".into(), 0.25)]);
        assert_eq!(
            hex(&scalar),
            "09000000000000f83f10032a0c0a0a0a03612f62150000803e"
        );
        let version = Event {
            wall_time: 2.0,
            step: 0,
            what: Some(event::What::FileVersion(FILE_VERSION.into())),
        };
        assert_eq!(
            hex(&version),
            "0900000000000000401a0d627261696e2e4576656e743a32"
        );
        // Python: a text value (plugin "text", data class tensor, DT_STRING
        // scalar "hi") under tag "t", and a SessionLog START at step 4.
        let text = Event::text(1.0, 0, "t", "hi");
        assert_eq!(
            hex(&text),
            "09000000000000f03f2a1b0a190a0174420808071200420268694a0a0a060a04746578742002"
        );
        let start = Event::session_start(1.0, 4);
        assert_eq!(hex(&start), "09000000000000f03f10043a020801");
    }

    #[test]
    fn a_writer_starts_with_the_file_version_and_appends_events() {
        let dir = tempfile::tempdir().expect("temp dir");
        let sub = dir.path().join("job-1/task-2");
        let mut writer = EventWriter::create(&sub).expect("create");
        writer
            .write(&Event::scalars(1.0, 5, &[("loss".into(), 0.5)]))
            .expect("write");
        writer.flush().expect("flush");
        let name = writer
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        let second = EventWriter::create(&sub).expect("second file");
        assert_ne!(second.path(), writer.path());
        let bytes = std::fs::read(writer.path()).expect("read");
        let events: Vec<Event> = read_records(&bytes)
            .expect("records")
            .iter()
            .map(|r| Event::decode(r.as_slice()).expect("event"))
            .collect();
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0].what,
            Some(event::What::FileVersion(FILE_VERSION.into()))
        );
        assert_eq!(events[1], Event::scalars(1.0, 5, &[("loss".into(), 0.5)]));
    }
}
