//! Links libtorch into `tli` (and this crate's test binaries) with an rpath and
//! `--no-as-needed` (see tli-build-support). The CUDA memory shim is tli-runtime's.

fn main() {
    tli_build_support::link_libtorch();
}
