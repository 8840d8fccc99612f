//! Opening data files. Only regular files are data: a bar, covariate or
//! contracts file is opened without blocking (a FIFO would otherwise wait
//! for a writer, holding a thread for as long as it likes), and what was
//! opened — not the path — is checked to be a regular file. A text file's
//! lines are capped ([`MAX_LINE_BYTES`]), so a file without line breaks (a
//! sparse file of zeros, a binary file) costs at most that much memory
//! before it is refused, not several times its size.

use crate::DataError;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The longest line a text data file may have: room for a header of a
/// million columns, far beyond any bar file.
pub const MAX_LINE_BYTES: u64 = 16 << 20;

/// Opens `path` for reading if it is a regular file (symbolic links
/// followed, as for any path a user names), else a clear error.
pub fn open_data_file(path: &Path) -> Result<File, DataError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| DataError::io(path, e))?;
    let kind = file
        .metadata()
        .map_err(|e| DataError::io(path, e))?
        .file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO (named pipe)"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else {
            "not a file"
        };
        return Err(DataError::bad_file(
            path,
            format!("is {what}, not a regular file; only regular files are read as data"),
        ));
    }
    // Back to blocking reads (a regular file never blocks anyway).
    // SAFETY: fcntl on a descriptor `file` owns.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// A reader that fails (`InvalidData`) as soon as a line grows past
/// [`MAX_LINE_BYTES`].
pub struct LineCap<R> {
    inner: R,
    /// Bytes since the last line break.
    open_line: u64,
    /// Bytes read so far.
    offset: u64,
}

impl<R: Read> LineCap<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            open_line: 0,
            offset: 0,
        }
    }
}

impl<R: Read> Read for LineCap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let chunk = &buf[..n];
        let mut start = 0;
        // Each line break ends a line; the bytes after the last one start the next.
        while let Some(at) = chunk[start..].iter().position(|&b| b == b'\n') {
            self.open_line += at as u64;
            self.check()?;
            self.open_line = 0;
            start += at + 1;
        }
        self.open_line += (n - start) as u64;
        self.check()?;
        self.offset += n as u64;
        Ok(n)
    }
}

impl<R> LineCap<R> {
    fn check(&self) -> std::io::Result<()> {
        if self.open_line > MAX_LINE_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "a line longer than {} MiB (from about byte {}): not a text data file",
                    MAX_LINE_BYTES >> 20,
                    self.offset
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_at_once_without_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("bars.csv");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = open_data_file(&fifo).unwrap_err().to_string();
        assert!(
            err.contains("is a FIFO (named pipe), not a regular file"),
            "{err}"
        );
        let err = open_data_file(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
        let err = open_data_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("character device"), "{err}");
    }

    #[test]
    fn a_line_past_the_cap_fails_and_shorter_ones_pass() {
        let ok = "a,b\n".repeat(1000);
        let mut out = Vec::new();
        LineCap::new(ok.as_bytes()).read_to_end(&mut out).unwrap();
        assert_eq!(out, ok.as_bytes());
        let long = std::io::repeat(b'x').take(MAX_LINE_BYTES + 10);
        let err = LineCap::new(long).read_to_end(&mut Vec::new()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(
            err.to_string().contains("a line longer than 16 MiB"),
            "{err}"
        );
        // Exactly at the cap, then a break: fine.
        let edge = std::io::repeat(b'x')
            .take(MAX_LINE_BYTES)
            .chain(&b"\nshort\n"[..]);
        LineCap::new(edge).read_to_end(&mut Vec::new()).unwrap();
    }
}
