//! A structural check of a plugin file before `dlopen` touches it.
//!
//! `dlopen` maps a library's segments as its headers describe them; if the
//! file is shorter than that (an interrupted copy or download), touching the
//! missing pages raises SIGBUS and kills the host. So before loading we read
//! the ELF header, the program headers and the section-header table position,
//! and refuse a file whose headers point past its end, that is not a 64-bit
//! little-endian shared object, or that is built for another machine.

use std::io::Read;
use std::path::Path;

const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
const ET_DYN: u16 = 3;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;

/// The `e_machine` value of the architecture this host was built for.
fn host_machine() -> Option<u16> {
    match std::env::consts::ARCH {
        "x86_64" => Some(62),
        "aarch64" => Some(183),
        _ => None,
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Why a file is not a loadable shared object for this host. The message
/// follows the file's name ("libx.so is truncated: …").
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot be opened: {0}")]
    Open(#[source] std::io::Error),
    #[error("cannot be inspected: {0}")]
    Inspect(#[source] std::io::Error),
    #[error("is not a shared library: {len} bytes is too short for an ELF header (truncated?)")]
    TooShort { len: u64 },
    #[error("is not a shared library (no ELF signature)")]
    NoSignature,
    #[error("is not a 64-bit little-endian ELF file")]
    Not64BitLittleEndian,
    #[error("is an ELF file but not a shared library")]
    NotShared,
    #[error("is built for another machine (ELF machine {machine}; this host is {host})")]
    OtherMachine { machine: u16, host: &'static str },
    #[error(
        "is truncated: its ELF headers describe at least {needed} bytes but the file has {len} \
         (copy or rebuild it again)"
    )]
    Truncated { needed: u64, len: u64 },
    #[error("has malformed program headers (entry size {entry_size})")]
    MalformedProgramHeaders { entry_size: u64 },
    #[error("cannot read its program headers: {0}")]
    ReadProgramHeaders(#[source] std::io::Error),
}

/// Checks `path`; `Err` holds the reason for the refusal.
pub fn check_shared_object(path: &Path) -> Result<(), ElfError> {
    let mut file = std::fs::File::open(path).map_err(ElfError::Open)?;
    let len = file.metadata().map_err(ElfError::Inspect)?.len();
    let mut header = [0u8; 64];
    if len < 64 || file.read_exact(&mut header).is_err() {
        return Err(ElfError::TooShort { len });
    }
    if header[..4] != ELF_MAGIC {
        return Err(ElfError::NoSignature);
    }
    if header[4] != 2 || header[5] != 1 {
        return Err(ElfError::Not64BitLittleEndian);
    }
    if u16_at(&header, 16) != ET_DYN {
        return Err(ElfError::NotShared);
    }
    let machine = u16_at(&header, 18);
    if let Some(expected) = host_machine() {
        if machine != expected {
            return Err(ElfError::OtherMachine {
                machine,
                host: std::env::consts::ARCH,
            });
        }
    }
    let truncated = |needed: u64| Err(ElfError::Truncated { needed, len });
    let (phoff, phentsize, phnum) = (
        u64_at(&header, 32),
        u16_at(&header, 54) as u64,
        u16_at(&header, 56) as u64,
    );
    let (shoff, shentsize, shnum) = (
        u64_at(&header, 40),
        u16_at(&header, 58) as u64,
        u16_at(&header, 60) as u64,
    );
    let ph_end = phoff.saturating_add(phentsize.saturating_mul(phnum));
    if ph_end > len {
        return truncated(ph_end);
    }
    if phentsize < 56 {
        return Err(ElfError::MalformedProgramHeaders {
            entry_size: phentsize,
        });
    }
    let sh_end = shoff.saturating_add(shentsize.saturating_mul(shnum));
    if shnum > 0 && sh_end > len {
        return truncated(sh_end);
    }
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(phoff))
        .and_then(|_| file.read_exact(&mut table))
        .map_err(ElfError::ReadProgramHeaders)?;
    for entry in table.chunks_exact(phentsize as usize) {
        let kind = u32_at(entry, 0);
        if kind == PT_LOAD || kind == PT_DYNAMIC {
            let end = u64_at(entry, 8).saturating_add(u64_at(entry, 32));
            if end > len {
                return truncated(end);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_test_binary_passes_and_truncations_fail() {
        // Any shared object will do; libc is mapped into every test process.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("libc.so"))
            .expect("libc is mapped");
        let bytes = std::fs::read(libc).unwrap();
        let dir = std::env::temp_dir().join(format!("tli-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let whole = dir.join("whole.so");
        std::fs::write(&whole, &bytes).unwrap();
        assert!(check_shared_object(&whole).is_ok());
        for keep in [10, 64, 4096, bytes.len() / 2, bytes.len() * 9 / 10] {
            let cut = dir.join(format!("cut{keep}.so"));
            std::fs::write(&cut, &bytes[..keep]).unwrap();
            let reason = check_shared_object(&cut).unwrap_err();
            assert!(
                matches!(
                    reason,
                    ElfError::Truncated { .. } | ElfError::TooShort { .. }
                ),
                "{keep}: {reason}"
            );
            let text = reason.to_string();
            assert!(
                text.contains("truncated") || text.contains("too short"),
                "{keep}: {text}"
            );
        }
        let text = dir.join("text.so");
        std::fs::write(&text, vec![b'x'; 200]).unwrap();
        let reason = check_shared_object(&text).unwrap_err();
        assert!(matches!(reason, ElfError::NoSignature), "{reason}");
        assert!(reason.to_string().contains("no ELF signature"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
