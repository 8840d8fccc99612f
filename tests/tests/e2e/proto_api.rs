//! The API definition itself: `buf lint` (STANDARD rules) passes, `buf breaking`
//! finds no wire/JSON-breaking change against the released tli.v1
//! (proto/releases/v1.0.0), and the check does catch a breaking edit.
//! buf comes from the npm registry (`make proto-tools`, part of `make test`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn proto_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proto")
}

fn buf() -> PathBuf {
    let buf = proto_dir().join("node_modules/.bin/buf");
    assert!(
        buf.exists(),
        "{} is missing: run `make proto-tools` (npm ci in proto/)",
        buf.display()
    );
    buf
}

fn run(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(buf())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run buf");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_api_passes_buf_lint_and_has_no_breaking_change_against_the_release() {
    let (ok, text) = run(&proto_dir(), &["lint"]);
    assert!(ok, "buf lint: {text}");
    let (ok, text) = run(
        &proto_dir(),
        &["breaking", ".", "--against", "releases/v1.0.0"],
    );
    assert!(ok, "buf breaking: {text}");
}

#[test]
fn buf_breaking_catches_a_changed_field_type() {
    let work = tempfile::tempdir().unwrap();
    let v1 = work.path().join("tli/v1");
    std::fs::create_dir_all(&v1).unwrap();
    for file in ["training.proto", "plugins.proto"] {
        let text = std::fs::read_to_string(proto_dir().join("tli/v1").join(file)).unwrap();
        std::fs::write(
            v1.join(file),
            text.replace("uint64 steps = 1;", "uint32 steps = 1;"),
        )
        .unwrap();
    }
    std::fs::write(
        work.path().join("buf.yaml"),
        "version: v2\nbreaking:\n  use:\n    - WIRE_JSON\n",
    )
    .unwrap();
    let against = proto_dir().join("releases/v1.0.0");
    let (ok, text) = run(
        work.path(),
        &["breaking", ".", "--against", against.to_str().unwrap()],
    );
    assert!(!ok, "a uint64 → uint32 change must be reported");
    assert!(
        text.contains("changed type from \"uint64\" to \"uint32\""),
        "{text}"
    );
}
