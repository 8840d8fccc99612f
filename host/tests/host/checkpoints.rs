//! Atomic checkpoint directories (`tli_host::orchestrator::checkpoint`):
//! writing with a manifest, verification that catches corruption, truncation
//! and half-written checkpoints, fallback to the previous good one, failed
//! writes that leave nothing behind, re-saves at the same step, retention.

use std::fs;
use std::path::{Path, PathBuf};

use tli_host::orchestrator::checkpoint::{
    self, latest_good, list, prune, verify, write_atomic, CheckpointError, ChecksumManifest,
    MANIFEST,
};

/// A checkpoint root like the host's `state_dir/checkpoints/task-<id>`.
fn root(tmp: &tempfile::TempDir) -> PathBuf {
    tmp.path().join("checkpoints").join("task-7")
}

/// A trainer's save: two files, one in a subdirectory.
fn two_files(step: u64) -> impl FnOnce(&Path) -> Result<(), std::io::Error> {
    move |dir: &Path| {
        fs::write(
            dir.join("model.safetensors"),
            format!("weights at step {step}").repeat(100),
        )?;
        fs::create_dir(dir.join("optim"))?;
        fs::write(dir.join("optim").join("adam.bin"), [step as u8; 4096])?;
        Ok(())
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read root")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_written_checkpoint_verifies_and_lists_its_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    let saved = write_atomic(&root, 1234, two_files(1234)).expect("write");
    assert_eq!(saved.dir, root.join("step-000000001234"));
    assert_eq!(saved.step, 1234);
    assert_eq!(saved.bytes, 2000 + 4096);
    assert_eq!(verify(&saved.dir).expect("verify"), saved.checksum);

    let manifest: ChecksumManifest =
        serde_json::from_slice(&fs::read(saved.dir.join(MANIFEST)).expect("read manifest"))
            .expect("parse manifest");
    assert_eq!(manifest.format, 1);
    assert_eq!(manifest.step, 1234);
    assert_eq!(manifest.checksum, saved.checksum);
    let paths: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["model.safetensors", "optim/adam.bin"]);
    assert_eq!(manifest.files[1].bytes, 4096);
    assert_eq!(manifest.files[1].sha256.len(), 64);
    // Only the checkpoint is left under the root: no temporary directory.
    assert_eq!(entries(&root), ["step-000000001234"]);
}

#[test]
fn a_corrupt_file_is_named_and_the_previous_checkpoint_is_used() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    let older = write_atomic(&root, 100, two_files(100)).expect("write 100");
    let newer = write_atomic(&root, 200, two_files(200)).expect("write 200");

    // Flip one byte without changing the size.
    let model = newer.dir.join("model.safetensors");
    let mut bytes = fs::read(&model).expect("read");
    bytes[10] ^= 0x01;
    fs::write(&model, bytes).expect("write");

    let err = verify(&newer.dir).expect_err("corrupt checkpoint must not verify");
    assert!(
        matches!(err, CheckpointError::HashMismatch { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("model.safetensors: sha256 mismatch (file changed or corrupt"),
        "{err}"
    );

    let listed = list(&root).expect("list");
    let candidates: Vec<&Path> = listed.iter().map(|(_, p)| p.as_path()).collect();
    assert_eq!(candidates, [newer.dir.as_path(), older.dir.as_path()]);
    let (good, refused) = latest_good(candidates);
    assert_eq!(good.as_deref(), Some(older.dir.as_path()));
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].0, newer.dir);
    assert!(refused[0].1.to_string().contains("model.safetensors"));
}

#[test]
fn a_failed_write_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    let err = write_atomic(&root, 5, |dir: &Path| {
        fs::write(dir.join("partial.bin"), b"half").map_err(|e| e.to_string())?;
        Err::<(), _>("CUDA out of memory while saving".to_string())
    })
    .expect_err("the trainer's error must come back");
    assert!(
        matches!(err, CheckpointError::Writer { step: 5, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("CUDA out of memory while saving"),
        "{err}"
    );
    assert!(entries(&root).is_empty(), "left: {:?}", entries(&root));
    assert!(list(&root).expect("list").is_empty());
}

#[test]
fn a_panicking_writer_leaves_no_temporary_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    let r = std::panic::catch_unwind(|| {
        let _ = write_atomic(&root, 6, |dir: &Path| -> Result<(), String> {
            fs::write(dir.join("x"), b"x").map_err(|e| e.to_string())?;
            panic!("trainer bug");
        });
    });
    assert!(r.is_err());
    assert!(entries(&root).is_empty(), "left: {:?}", entries(&root));
}

#[test]
fn a_half_written_checkpoint_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    let good = write_atomic(&root, 10, two_files(10)).expect("write");
    // What a non-atomic writer leaves after a crash: files, no manifest.
    let half = checkpoint::step_dir(&root, 20);
    fs::create_dir_all(&half).expect("mkdir");
    fs::write(half.join("model.safetensors"), b"partial").expect("write");

    let err = verify(&half).expect_err("no manifest");
    assert!(matches!(err, CheckpointError::ManifestMissing), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("MANIFEST.json missing: half-written checkpoint"),
        "{err}"
    );
    let (best, refused) = latest_good([half.as_path(), good.dir.as_path()]);
    assert_eq!(best, Some(good.dir));
    assert_eq!(refused.len(), 1);
}

#[test]
fn a_truncated_file_is_a_size_mismatch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    let saved = write_atomic(&root, 3, two_files(3)).expect("write");
    let file = saved.dir.join("optim").join("adam.bin");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open");
    f.set_len(100).expect("truncate");
    drop(f);
    let err = verify(&saved.dir).expect_err("truncated");
    match &err {
        CheckpointError::SizeMismatch {
            file,
            expected,
            actual,
        } => {
            assert_eq!(file, "optim/adam.bin");
            assert_eq!((*expected, *actual), (4096, 100));
        }
        other => panic!("expected a size mismatch, got {other:?}"),
    }
    assert!(
        err.to_string().starts_with("optim/adam.bin: size mismatch"),
        "{err}"
    );
}

#[test]
fn missing_extra_and_edited_manifest_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);

    let a = write_atomic(&root, 1, two_files(1)).expect("write");
    fs::remove_file(a.dir.join("optim").join("adam.bin")).expect("rm");
    let err = verify(&a.dir).expect_err("missing file");
    assert!(
        matches!(&err, CheckpointError::FileMissing { file } if file == "optim/adam.bin"),
        "{err:?}"
    );

    let b = write_atomic(&root, 2, two_files(2)).expect("write");
    fs::write(b.dir.join("stray.txt"), b"?").expect("write");
    let err = verify(&b.dir).expect_err("unlisted file");
    assert!(
        matches!(&err, CheckpointError::Unlisted { file } if file == "stray.txt"),
        "{err:?}"
    );

    let c = write_atomic(&root, 3, two_files(3)).expect("write");
    let path = c.dir.join(MANIFEST);
    let mut m: ChecksumManifest =
        serde_json::from_slice(&fs::read(&path).expect("read")).expect("parse");
    m.files.pop();
    fs::write(&path, serde_json::to_vec(&m).expect("json")).expect("write");
    let err = verify(&c.dir).expect_err("edited manifest");
    assert!(matches!(err, CheckpointError::ChecksumMismatch), "{err:?}");

    let d = write_atomic(&root, 4, two_files(4)).expect("write");
    fs::write(d.dir.join(MANIFEST), b"{not json").expect("write");
    let err = verify(&d.dir).expect_err("garbled manifest");
    assert!(
        matches!(err, CheckpointError::ManifestInvalid { .. }),
        "{err:?}"
    );

    let err = verify(&root.join("step-000000000099")).expect_err("no such dir");
    assert!(matches!(err, CheckpointError::NoSuchDir { .. }), "{err:?}");
}

#[test]
fn a_trainer_may_not_write_the_manifest_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    let err = write_atomic(&root, 1, |dir: &Path| fs::write(dir.join(MANIFEST), b"{}"))
        .expect_err("reserved name");
    assert!(matches!(err, CheckpointError::ReservedName), "{err:?}");
    assert!(entries(&root).is_empty());
}

#[test]
fn a_resave_at_the_same_step_replaces_the_checkpoint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    let first = write_atomic(&root, 50, two_files(50)).expect("write");
    let second = write_atomic(&root, 50, |dir: &Path| {
        fs::write(dir.join("model.safetensors"), b"resumed weights")
    })
    .expect("re-save");
    assert_eq!(first.dir, second.dir);
    assert_ne!(first.checksum, second.checksum);
    assert_eq!(verify(&second.dir).expect("verify"), second.checksum);
    assert_eq!(
        fs::read(second.dir.join("model.safetensors")).expect("read"),
        b"resumed weights"
    );
    assert!(!second.dir.join("optim").exists(), "old files must be gone");
    assert_eq!(entries(&root), ["step-000000000050"]);
}

#[test]
fn prune_keeps_the_newest_and_cleans_temporaries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    // Steps out of order and of different digit counts: order is numeric.
    for step in [30, 5, 1_000_000_000_000, 20, 100] {
        write_atomic(&root, step, two_files(step)).expect("write");
    }
    // Leftovers of crashed writes and replacements.
    fs::create_dir_all(root.join(".tmp-step-7-1-0/optim")).expect("mkdir");
    fs::create_dir_all(root.join(".tmp-old-step-8-1-0")).expect("mkdir");
    fs::write(root.join("notes.txt"), b"not a checkpoint").expect("write");

    let steps: Vec<u64> = list(&root).expect("list").iter().map(|(s, _)| *s).collect();
    assert_eq!(steps, [1_000_000_000_000, 100, 30, 20, 5]);

    let removed = prune(&root, 2).expect("prune");
    let mut removed_names: Vec<String> = removed
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    removed_names.sort();
    assert_eq!(
        removed_names,
        [
            ".tmp-old-step-8-1-0",
            ".tmp-step-7-1-0",
            "step-000000000005",
            "step-000000000020",
            "step-000000000030",
        ]
    );
    assert_eq!(
        entries(&root),
        ["notes.txt", "step-000000000100", "step-1000000000000"]
    );
    assert!(prune(&root, 2).expect("prune again").is_empty());
}

#[test]
fn prune_refuses_to_keep_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    write_atomic(&root, 1, two_files(1)).expect("write");
    let err = prune(&root, 0).expect_err("keep = 0");
    assert!(matches!(err, CheckpointError::KeepZero), "{err:?}");
    assert!(err.to_string().contains("at least 1"), "{err}");
    assert_eq!(list(&root).expect("list").len(), 1);
}

#[test]
fn a_missing_root_has_no_checkpoints() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root(&tmp);
    assert!(list(&root).expect("list").is_empty());
    assert!(prune(&root, 3).expect("prune").is_empty());
    let (best, refused) = latest_good(std::iter::empty());
    assert!(best.is_none() && refused.is_empty());
}
