//! Opening data files. Only regular files are data: a bar, covariate or
//! contracts file is opened without blocking (a FIFO would otherwise wait
//! for a writer, holding a thread for as long as it likes), and what was
//! opened — not the path — is checked to be a regular file. A text file's
//! lines are capped ([`MAX_LINE_BYTES`]), so a file without line breaks (a
//! sparse file of zeros, a binary file) costs at most that much memory
//! before it is refused, not several times its size.
//!
//! A host confines every data file its process opens to its data roots
//! ([`confine_to`]): each open is checked by the file it actually opened
//! (the kernel's name for the descriptor), not by the path it was given, so
//! a symbolic link or directory swapped between a check and the open cannot
//! lead outside, and nothing of a file outside is ever read.

use crate::DataError;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// The directories (canonical) this process may read data files under;
/// `None`: anywhere (the CLI's own commands read what their user names).
static CONFINEMENT: RwLock<Option<Arc<[PathBuf]>>> = RwLock::new(None);

/// From now on, [`open_data_file`] in this process opens only files that
/// lie under one of `roots` (canonical directories; `/` allows everything).
/// A host sets this once, at start, to its data roots.
pub fn confine_to(roots: &[PathBuf]) {
    let roots: Arc<[PathBuf]> = roots.iter().cloned().collect();
    match CONFINEMENT.write() {
        Ok(mut confinement) => *confinement = Some(roots),
        Err(poisoned) => *poisoned.into_inner() = Some(roots),
    }
}

fn confinement() -> Option<Arc<[PathBuf]>> {
    match CONFINEMENT.read() {
        Ok(c) => c.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// The path the kernel holds for an open file: what was opened, with every
/// symbolic link and `..` already followed.
pub fn opened_path(file: &File) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Refuses `file` (opened from `path`) unless what was opened lies under a root.
fn check_confined(path: &Path, file: &File, roots: &[PathBuf]) -> Result<(), DataError> {
    let opened = opened_path(file).map_err(|e| {
        DataError::bad_file(
            path,
            format!(
                "cannot tell which file was opened ({e}); the host reads data only when it \
                 can check the file is under its data roots (is /proc mounted?)"
            ),
        )
    })?;
    if roots.iter().any(|root| opened.starts_with(root)) {
        Ok(())
    } else {
        Err(DataError::OutsideRoots {
            file: path.to_path_buf(),
        })
    }
}

/// The longest line a text data file may have: room for a header of a
/// million columns, far beyond any bar file.
pub const MAX_LINE_BYTES: u64 = 16 << 20;

/// Opens `path` for reading if it is a regular file (symbolic links
/// followed, as for any path a user names) and, in a confined process
/// ([`confine_to`]), one under the data roots; else a clear error.
pub fn open_data_file(path: &Path) -> Result<File, DataError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| DataError::io(path, e))?;
    // What was opened is checked before anything else is said about it.
    if let Some(roots) = confinement() {
        check_confined(path, &file, &roots)?;
    }
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
    fn what_was_opened_is_checked_not_the_path_given() {
        let (root, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let roots = [root.path().canonicalize().unwrap()];
        let (inside, outside) = (root.path().join("a.csv"), elsewhere.path().join("b.csv"));
        std::fs::write(&inside, "inside").unwrap();
        std::fs::write(&outside, "SECRET").unwrap();
        let link = root.path().join("link.csv");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        // A directory inside the root that is a link to one outside.
        let dir_link = root.path().join("sub");
        std::os::unix::fs::symlink(elsewhere.path(), &dir_link).unwrap();
        let opened = |p: &Path| {
            let file = File::open(p).unwrap();
            check_confined(p, &file, &roots)
        };
        assert!(opened(&inside).is_ok());
        for refused in [link.clone(), dir_link.join("b.csv"), outside.clone()] {
            let err = opened(&refused).unwrap_err().to_string();
            assert!(err.contains("outside the host's data roots"), "{err}");
            assert!(!err.contains("SECRET"), "{err}");
        }
        assert_eq!(
            opened_path(&File::open(&link).unwrap()).unwrap(),
            outside.canonicalize().unwrap()
        );
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
