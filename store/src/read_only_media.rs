//! Reading a store on a read-only filesystem (a snapshot, a read-only mount
//! of a finished run). SQLite opens a WAL-mode database read-only only if it
//! can find or create the `-shm` file; on read-only media it cannot, so the
//! store is opened as `immutable` instead. That is safe exactly there: no
//! process can write a read-only filesystem, so nothing changes under the
//! reader. (Elsewhere a host may be writing, and `immutable` would be wrong.)

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

/// Whether `dir` is on a filesystem mounted read-only.
pub(super) fn on_read_only_filesystem(dir: &Path) -> bool {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path and a zeroed out-struct of the right type.
    unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        libc::statvfs(path.as_ptr(), &mut stat) == 0 && stat.f_flag & libc::ST_RDONLY != 0
    }
}

/// Opens `db` read-only as an immutable file (see the module documentation).
pub(super) fn open_immutable(db: &Path) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(
        uri(db),
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
}

/// `file:` URI of a path, with the characters URIs give meaning to escaped.
fn uri(path: &Path) -> String {
    let mut out = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push_str("?immutable=1");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_escape_what_would_change_their_meaning() {
        assert_eq!(
            uri(Path::new("/a b/x?y#z%/tli.sqlite3")),
            "file:/a%20b/x%3Fy%23z%25/tli.sqlite3?immutable=1"
        );
    }

    #[test]
    fn an_ordinary_directory_is_not_read_only_media() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!on_read_only_filesystem(dir.path()));
    }
}
