//! The kit's own test binaries link libtorch: rpath and `--no-as-needed` (see tli-build-support).
fn main() {
    tli_build_support::link_libtorch();
}
