//! `tli-build-support`: the one build-script step every final tli artifact
//! (the `tli` binary and each plugin cdylib) needs when it links libtorch.
//!
//! * an rpath to libtorch's `lib` directory, so nothing needs `LD_LIBRARY_PATH`;
//! * `torch_cuda` (when present) and `torch` linked with `--no-as-needed`, or
//!   the linker drops them as "unused" and libtorch silently reports no CUDA
//!   (tch-rs
//!   <https://github.com/LaurentMazare/tch-rs/issues/980>, `/907`, `/921`).
//!
//! Use from `build.rs` of a crate that depends on `torch-sys` **directly**
//! (only direct dependents see `DEP_TCH_LIBTORCH_LIB`):
//!
//! ```ignore
//! fn main() { tli_build_support::link_libtorch(); }
//! ```

use std::path::Path;

/// Emits the link arguments described in the crate docs. Panics with an
/// explanation (build scripts report errors by panicking) when the crate
/// does not depend on `torch-sys` directly.
pub fn link_libtorch() {
    let lib_dir = std::env::var("DEP_TCH_LIBTORCH_LIB").unwrap_or_else(|_| {
        panic!(
            "DEP_TCH_LIBTORCH_LIB is not set: add `torch-sys = \"=0.24.0\"` to this crate's \
             [dependencies] (cargo passes a links-key variable only to direct dependents)"
        )
    });
    for arg in link_args(Path::new(&lib_dir)) {
        println!("cargo:rustc-link-arg={arg}");
    }
}

/// The linker arguments for a libtorch `lib` directory.
pub fn link_args(lib_dir: &Path) -> Vec<String> {
    let mut args = vec![
        format!("-Wl,-rpath,{}", lib_dir.display()),
        format!("-L{}", lib_dir.display()),
        "-Wl,--no-as-needed".to_string(),
    ];
    if lib_dir.join("libtorch_cuda.so").exists() {
        args.push("-ltorch_cuda".to_string());
    }
    args.push("-ltorch".to_string());
    args.push("-Wl,--as-needed".to_string());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_is_linked_only_when_present() {
        let dir = std::env::temp_dir().join(format!("tli-bs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!link_args(&dir).iter().any(|a| a == "-ltorch_cuda"));
        std::fs::write(dir.join("libtorch_cuda.so"), b"").unwrap();
        let args = link_args(&dir);
        let no_as_needed = args.iter().position(|a| a == "-Wl,--no-as-needed").unwrap();
        let cuda = args.iter().position(|a| a == "-ltorch_cuda").unwrap();
        assert!(no_as_needed < cuda);
        assert!(args[0].starts_with("-Wl,-rpath,"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
