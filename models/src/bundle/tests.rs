use super::*;
use crate::card::{AssetCard, ContractCard, InputSchema, PluginRef, SplitTimes, TrainingRecord};
use tli_data::features::{FeatureConfig, FeatureStats};

pub(crate) fn card() -> ModelCard {
    let names = vec!["logret_1".to_string(), "range".to_string()];
    ModelCard {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        plugin: PluginRef {
            name: "template".into(),
            version: "0.1.0".into(),
            api_version: "1.2.0".into(),
            family: "mlp".into(),
        },
        config: serde_json::json!({"hidden_sizes": [8]}),
        features: FeatureConfig::default(),
        pooled: false,
        inputs: InputSchema {
            feature_names: names.clone(),
            feature_roles: vec!["observed_past".into(); 2],
            feature_variables: Vec::new(),
            target_names: vec!["fwd_logret_1".into()],
            target_horizons: vec![1],
            bar_interval_ns: 86_400_000_000_000,
            periods_per_year: 252.0,
        },
        assets: vec![AssetCard {
            symbol: "ES".into(),
            asset_index: 0,
            contract: ContractCard {
                root: "ES".into(),
                tick_size: 0.25,
                point_value: 50.0,
                currency: "USD".into(),
            },
            stats: FeatureStats {
                feature_names: names,
                feature_mean: vec![0.0, 0.01],
                feature_std: vec![0.01, 0.005],
                target_names: vec!["fwd_logret_1".into()],
                target_scales: vec![0.012],
                levels: Default::default(),
            },
            splits: SplitTimes::default(),
        }],
        metrics: [("test_mse".to_string(), 0.98)].into(),
        training: TrainingRecord {
            task: "local-1-template".into(),
            seed: 42,
            steps: 10,
            device: "cpu".into(),
            data: Vec::new(),
            saved_at_ms: 0,
        },
    }
}

fn write_bundle(dir: &Path) -> PathBuf {
    let writer = BundleWriter::create(dir).unwrap();
    std::fs::write(writer.weights_path(), b"weights bytes").unwrap();
    writer.finish(&card()).unwrap()
}

#[test]
fn a_written_bundle_opens_with_its_card_and_sha256sum_format() {
    let root = tempfile::tempdir().unwrap();
    let dir = write_bundle(&root.path().join("m"));
    let bundle = Bundle::open(&dir).unwrap();
    assert_eq!(bundle.card, card());
    assert_eq!(
        std::fs::read(bundle.weights_path()).unwrap(),
        b"weights bytes"
    );
    let sums = std::fs::read_to_string(dir.join(CHECKSUMS_FILE)).unwrap();
    assert!(sums.ends_with(&format!("{}  {WEIGHTS_FILE}\n", sha256(b"weights bytes"))));
    // Only the bundle is left: no staging directory.
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1);
    // A copy is byte for byte.
    let copy = bundle.copy_to(&root.path().join("copy")).unwrap();
    for f in [CARD_FILE, WEIGHTS_FILE, CHECKSUMS_FILE] {
        assert_eq!(
            std::fs::read(dir.join(f)).unwrap(),
            std::fs::read(copy.join(f)).unwrap()
        );
    }
}

#[test]
fn an_existing_directory_is_never_replaced_and_an_abandoned_bundle_leaves_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), b"mine").unwrap();
    let e = BundleWriter::create(&dir).err().unwrap();
    assert!(matches!(e, BundleError::Exists { .. }), "{e}");
    // Created while the bundle was being written: still not replaced.
    let other = root.path().join("n");
    let writer = BundleWriter::create(&other).unwrap();
    std::fs::write(writer.weights_path(), b"w").unwrap();
    std::fs::create_dir(&other).unwrap();
    let e = writer.finish(&card()).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    assert_eq!(std::fs::read(dir.join("keep")).unwrap(), b"mine");
    drop(BundleWriter::create(&root.path().join("x")).unwrap());
    let mut names: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["m", "n"]);
}

/// Each kind of damage is refused with one line that names it.
#[test]
fn damaged_bundles_are_refused_with_one_line_each() {
    let root = tempfile::tempdir().unwrap();
    let fresh = |name: &str| write_bundle(&root.path().join(name));
    let refusal = |dir: &Path| {
        let e = Bundle::open(dir).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        e
    };

    let d = fresh("truncated");
    std::fs::write(d.join(WEIGHTS_FILE), b"weights").unwrap();
    let e = refusal(&d);
    assert!(
        e.contains("weights.safetensors does not match its checksum"),
        "{e}"
    );

    let d = fresh("edited");
    let text = std::fs::read_to_string(d.join(CARD_FILE)).unwrap();
    std::fs::write(d.join(CARD_FILE), text.replace("0.98", "0.5")).unwrap();
    assert!(refusal(&d).contains("model.json does not match its checksum"));

    let d = fresh("bad-sum");
    let sums = std::fs::read_to_string(d.join(CHECKSUMS_FILE)).unwrap();
    std::fs::write(
        d.join(CHECKSUMS_FILE),
        sums.replacen(char::is_alphanumeric, "0", 3),
    )
    .unwrap();
    assert!(refusal(&d).contains("does not match its checksum"));

    let d = fresh("no-sums");
    std::fs::write(d.join(CHECKSUMS_FILE), b"").unwrap();
    assert!(refusal(&d).contains("has no checksum for model.json"));

    let d = fresh("link");
    std::fs::remove_file(d.join(WEIGHTS_FILE)).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", d.join(WEIGHTS_FILE)).unwrap();
    assert!(refusal(&d).contains("symbolic link"));

    let d = fresh("fifo");
    std::fs::remove_file(d.join(WEIGHTS_FILE)).unwrap();
    let c = CString::new(d.join(WEIGHTS_FILE).as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(refusal(&d).contains("not a regular file"));

    let e = refusal(&root.path().join("absent"));
    assert!(e.contains("absent"), "{e}");
    assert!(refusal(root.path()).contains("is not a model bundle: it has no"));
}

/// A card edited and re-signed is still checked: a newer format asks for
/// an upgrade, an unknown field and inconsistent statistics are named.
#[test]
fn an_edited_and_resigned_card_is_still_checked() {
    let root = tempfile::tempdir().unwrap();
    let resign = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| {
        let mut value = serde_json::to_value(card()).unwrap();
        edit(&mut value);
        let writer = BundleWriter::create(&root.path().join(name)).unwrap();
        std::fs::write(writer.weights_path(), b"w").unwrap();
        let dir = writer
            .finish_with_card_bytes(&serde_json::to_vec(&value).unwrap())
            .unwrap();
        Bundle::open(&dir).unwrap_err().to_string()
    };
    let e = resign("newer", &|v| v["format_version"] = 99.into());
    assert!(e.contains("format 99") && e.contains("upgrade tli"), "{e}");
    let e = resign("unknown", &|v| v["surprise"] = 1.into());
    assert!(e.contains("unknown field `surprise`"), "{e}");
    let e = resign("stats", &|v| {
        v["assets"][0]["stats"]["feature_std"] = serde_json::json!([1.0]);
    });
    assert!(e.contains("wrong number of values"), "{e}");
    let e = resign("type", &|v| v["plugin"]["name"] = 3.into());
    assert!(e.contains("plugin.name"), "{e}");
}
