//! An rpath to libtorch and `--no-as-needed` for this crate's own test binaries (they link
//! libtorch through tli-runtime); see tli-build-support.

fn main() {
    tli_build_support::link_libtorch();
}
