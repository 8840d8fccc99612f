//! Byte-level and text-level mutations of valid files: bit flips, bytes set,
//! truncation, inserted, deleted and duplicated ranges, hostile numbers
//! (huge counts, lengths and offsets) written over header fields; for CSV
//! also fields replaced with hostile text, lines swapped, absurdly long
//! fields, headers with hundreds of thousands of columns and other encodings.

use proptest::prelude::*;
use proptest::sample::Index;

/// Numbers that break length, count and offset fields: zero, sign bits,
/// all ones, "billions".
pub const HOSTILE_NUMBERS: [u64; 14] = [
    0,
    1,
    0x7f,
    0xff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 32,
    1_000_000_000,
    3_000_000_000,
    1 << 40,
    i64::MAX as u64,
    u64::MAX,
];

/// Where an edit lands: near the start (headers, DBN metadata), near the end
/// (Parquet's footer), or anywhere.
#[derive(Clone, Debug)]
pub enum Spot {
    Head(u16),
    Tail(u16),
    Any(Index),
}

impl Spot {
    /// A position in `0..=len`.
    fn at(&self, len: usize) -> usize {
        match self {
            Spot::Head(k) => usize::from(*k).min(len),
            Spot::Tail(k) => len.saturating_sub(usize::from(*k)),
            Spot::Any(i) => i.index(len + 1),
        }
    }
}

fn spot() -> impl Strategy<Value = Spot> {
    prop_oneof![
        2 => (0u16..512).prop_map(Spot::Head),
        2 => (1u16..2048).prop_map(Spot::Tail),
        3 => any::<Index>().prop_map(Spot::Any),
    ]
}

/// One byte-level edit.
#[derive(Clone, Debug)]
pub enum Edit {
    Flip {
        at: Spot,
        bit: u8,
    },
    Set {
        at: Spot,
        byte: u8,
    },
    Truncate {
        at: Spot,
    },
    Insert {
        at: Spot,
        bytes: Vec<u8>,
    },
    /// `count` copies of `byte` (long runs: 0xff varints, zero pages).
    Run {
        at: Spot,
        byte: u8,
        count: u16,
    },
    Delete {
        at: Spot,
        len: u16,
    },
    Duplicate {
        from: Spot,
        len: u16,
        to: Spot,
    },
    /// A hostile number, little-endian, `width` bytes of it.
    Number {
        at: Spot,
        width: u8,
        value: u64,
    },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (spot(), 0u8..8).prop_map(|(at, bit)| Edit::Flip { at, bit }),
        3 => (spot(), any::<u8>()).prop_map(|(at, byte)| Edit::Set { at, byte }),
        2 => spot().prop_map(|at| Edit::Truncate { at }),
        2 => (spot(), proptest::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(at, bytes)| Edit::Insert { at, bytes }),
        1 => (spot(), prop::sample::select(vec![0u8, 0xff, 0x80, b'"', b',', b'\n']), 1u16..8192)
            .prop_map(|(at, byte, count)| Edit::Run { at, byte, count }),
        2 => (spot(), 1u16..4096).prop_map(|(at, len)| Edit::Delete { at, len }),
        2 => (spot(), 1u16..4096, spot())
            .prop_map(|(from, len, to)| Edit::Duplicate { from, len, to }),
        3 => (spot(), prop::sample::select(vec![1u8, 2, 4, 8]), prop::sample::select(HOSTILE_NUMBERS.to_vec()))
            .prop_map(|(at, width, value)| Edit::Number { at, width, value }),
    ]
}

/// One to four edits.
pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    proptest::collection::vec(edit(), 1..=4)
}

/// Applies `edits` in order.
pub fn apply(bytes: &mut Vec<u8>, edits: &[Edit]) {
    for edit in edits {
        let len = bytes.len();
        match edit {
            Edit::Flip { at, bit } => {
                let i = at.at(len);
                if i < len {
                    bytes[i] ^= 1 << bit;
                }
            }
            Edit::Set { at, byte } => {
                let i = at.at(len);
                if i < len {
                    bytes[i] = *byte;
                }
            }
            Edit::Truncate { at } => bytes.truncate(at.at(len)),
            Edit::Insert { at, bytes: new } => {
                let i = at.at(len);
                bytes.splice(i..i, new.iter().copied());
            }
            Edit::Run { at, byte, count } => {
                let i = at.at(len);
                bytes.splice(i..i, std::iter::repeat_n(*byte, usize::from(*count)));
            }
            Edit::Delete { at, len: n } => {
                let i = at.at(len);
                let end = (i + usize::from(*n)).min(len);
                bytes.drain(i..end);
            }
            Edit::Duplicate { from, len: n, to } => {
                let i = from.at(len);
                let end = (i + usize::from(*n)).min(len);
                let chunk = bytes[i..end].to_vec();
                let j = to.at(len);
                bytes.splice(j..j, chunk);
            }
            Edit::Number { at, width, value } => {
                let i = at.at(len);
                let le = value.to_le_bytes();
                for (k, b) in le.iter().take(usize::from(*width)).enumerate() {
                    if let Some(slot) = bytes.get_mut(i + k) {
                        *slot = *b;
                    }
                }
            }
        }
    }
}

// ----- CSV text ------------------------------------------------------------------

/// Field texts a CSV reader must refuse or read correctly.
pub const HOSTILE_FIELDS: [&str; 24] = [
    "NaN",
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "-0",
    "1e309",
    "1e-320",
    "",
    "   ",
    "\"",
    "\"\"\"",
    "9999-12-31",
    "0000-01-01",
    "2262-04-12T00:00:00Z",
    "1677-09-21",
    "2024-02-30",
    "18446744073709551616",
    "-9223372036854775808",
    "99999999999999999999999",
    "１２３",
    "1_000",
    "0x10",
];

/// One CSV-level edit.
#[derive(Clone, Debug)]
pub enum TextEdit {
    Bytes(Edit),
    /// Replace one field of one line.
    Field {
        line: Index,
        column: Index,
        text: &'static str,
    },
    SwapLines(Index, Index),
    /// Make one field this many bytes long.
    LongField {
        line: Index,
        len: u32,
    },
    /// Append this many columns to the header (distinct names, or all empty).
    ManyColumns {
        count: u32,
        distinct: bool,
    },
    /// Re-encode the whole text as UTF-16 LE with a byte-order mark.
    Utf16,
    /// Replace the text's first `é`-able letter with a Latin-1 byte.
    Latin1(Index),
    CrLf,
}

fn text_edit() -> impl Strategy<Value = TextEdit> {
    prop_oneof![
        4 => edit().prop_map(TextEdit::Bytes),
        5 => (any::<Index>(), any::<Index>(), prop::sample::select(HOSTILE_FIELDS.to_vec()))
            .prop_map(|(line, column, text)| TextEdit::Field { line, column, text }),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| TextEdit::SwapLines(a, b)),
        1 => (any::<Index>(), 1u32..(4 << 20)).prop_map(|(line, len)| TextEdit::LongField { line, len }),
        1 => (1u32..300_000, any::<bool>())
            .prop_map(|(count, distinct)| TextEdit::ManyColumns { count, distinct }),
        1 => Just(TextEdit::Utf16),
        1 => any::<Index>().prop_map(TextEdit::Latin1),
        1 => Just(TextEdit::CrLf),
    ]
}

/// One to three CSV edits.
pub fn text_edits() -> impl Strategy<Value = Vec<TextEdit>> {
    proptest::collection::vec(text_edit(), 1..=3)
}

/// Applies `edits` to CSV bytes.
pub fn apply_text(bytes: &mut Vec<u8>, edits: &[TextEdit]) {
    for edit in edits {
        match edit {
            TextEdit::Bytes(e) => apply(bytes, std::slice::from_ref(e)),
            TextEdit::Field { line, column, text } => {
                edit_lines(bytes, |lines| {
                    let l = line.index(lines.len());
                    let mut fields: Vec<String> = lines[l].split(',').map(str::to_string).collect();
                    let c = column.index(fields.len());
                    fields[c] = (*text).to_string();
                    lines[l] = fields.join(",");
                });
            }
            TextEdit::SwapLines(a, b) => edit_lines(bytes, |lines| {
                let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                lines.swap(a, b);
            }),
            TextEdit::LongField { line, len } => edit_lines(bytes, |lines| {
                let l = line.index(lines.len());
                let long = "7".repeat(*len as usize);
                lines[l] = match lines[l].split_once(',') {
                    Some((_, rest)) => format!("{long},{rest}"),
                    None => long,
                };
            }),
            TextEdit::ManyColumns { count, distinct } => edit_lines(bytes, |lines| {
                let mut header = std::mem::take(&mut lines[0]);
                for k in 0..*count {
                    header.push(',');
                    if *distinct {
                        header.push_str(&format!("c{k}"));
                    }
                }
                lines[0] = header;
            }),
            TextEdit::Utf16 => {
                let text = String::from_utf8_lossy(bytes).into_owned();
                let mut out = vec![0xff, 0xfe];
                for unit in text.encode_utf16() {
                    out.extend_from_slice(&unit.to_le_bytes());
                }
                *bytes = out;
            }
            TextEdit::Latin1(at) => {
                let letters: Vec<usize> = (0..bytes.len())
                    .filter(|&i| bytes[i].is_ascii_alphanumeric())
                    .collect();
                if !letters.is_empty() {
                    bytes[letters[at.index(letters.len())]] = 0xe9;
                }
            }
            TextEdit::CrLf => {
                let text = String::from_utf8_lossy(bytes).replace('\n', "\r\n");
                *bytes = text.into_bytes();
            }
        }
    }
}

/// Runs `f` on the lines of `bytes` (as text; a file that is not UTF-8 any
/// more is left as it is) and joins them again.
fn edit_lines(bytes: &mut Vec<u8>, f: impl FnOnce(&mut Vec<String>)) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    f(&mut lines);
    *bytes = lines.join("\n").into_bytes();
}
