//! The plugin registry against real `.so` files through the real `tli`
//! binary: good plugins load, incompatible / truncated / foreign libraries are
//! refused with one clear line each, and the rest still load.

use tli_e2e_tests::*;

#[test]
fn incompatible_truncated_and_foreign_libraries_are_refused_while_others_load() {
    let dir = PluginDir::new();
    dir.add(TEMPLATE, "template");
    dir.add(BEHAVIOUR, "behaviour");
    let future = dir.add(FUTURE_API, "future_api");
    let truncated = dir.add_truncated(TEMPLATE, "truncated", 8192);
    let foreign = dir.add(NOT_A_PLUGIN, "foreign");
    std::fs::write(dir.path().join("README.txt"), "not a library, not matched").unwrap();

    let out = run_tli(
        dir.path(),
        &["plugins", "list", "--local", "--output", "json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let listing = json(&out);
    let mut loaded: Vec<&str> = listing["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    loaded.sort();
    assert_eq!(loaded, ["behaviour", "template"]);

    let refused = listing["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 3, "{refused:?}");
    let reason_for = |path: &std::path::Path| -> String {
        refused
            .iter()
            .find(|r| r["path"].as_str() == Some(path.to_str().unwrap()))
            .unwrap_or_else(|| panic!("{} not refused: {refused:?}", path.display()))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let future_reason = reason_for(&future);
    assert!(
        future_reason.contains("plugin API 2.0.0"),
        "{future_reason}"
    );
    assert!(
        future_reason.contains("major versions differ"),
        "{future_reason}"
    );
    assert!(
        future_reason.contains("rebuild the plugin against tli-plugin-api 1.x"),
        "{future_reason}"
    );
    let truncated_reason = reason_for(&truncated);
    assert!(
        truncated_reason.contains("is truncated"),
        "{truncated_reason}"
    );
    let foreign_reason = reason_for(&foreign);
    assert!(
        foreign_reason.contains("not a tli plugin"),
        "{foreign_reason}"
    );

    // The table form prints one line per refused file: the file, then the reason.
    let out = run_tli(dir.path(), &["plugins", "list", "--local"]);
    assert!(out.status.success());
    let text = stdout(&out);
    let refusal_lines: Vec<&str> = text.lines().filter(|l| l.starts_with("refused ")).collect();
    assert_eq!(refusal_lines.len(), 3, "{text}");
    assert!(refusal_lines
        .iter()
        .any(|l| l.contains("libtli_plugin_future_api.so: built against plugin API 2.0.0")));
    assert!(text.contains("template"), "{text}");
}

#[test]
fn an_unreadable_plugin_directory_is_one_clear_error() {
    let out = run_tli(
        std::path::Path::new("/definitely/not/a/dir"),
        &["plugins", "list", "--local"],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("plugin directory /definitely/not/a/dir cannot be read"),
        "{err}"
    );
    assert!(err.contains("--plugin-dir"), "{err}");
}

#[test]
fn two_files_with_the_same_plugin_name_and_version_load_once() {
    let dir = PluginDir::new();
    let first = dir.add(TEMPLATE, "a_template");
    let second = dir.add(TEMPLATE, "b_template");
    // The same name and version from a different build.
    let third = dir.add_behaviour_version("c_behaviour", "0.1.0");
    let fourth = dir.path().join("libtli_plugin_d_behaviour.so");
    let mut other_build = tli_testkit::behaviour_with_version("0.1.0");
    let last = other_build.len() - 1;
    other_build[last] ^= 0xff;
    std::fs::write(&fourth, other_build).unwrap();
    let listing = json(&run_tli(
        dir.path(),
        &["plugins", "list", "--local", "-o", "json"],
    ));
    let loaded: Vec<&str> = listing["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(loaded, [first.to_str().unwrap(), third.to_str().unwrap()]);
    let refused = &listing["refused"];
    assert_eq!(refused[0]["path"].as_str(), second.to_str());
    let reason = refused[0]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        format!("the same library as {}, already loaded", first.display())
    );
    assert_eq!(refused[1]["path"].as_str(), fourth.to_str());
    let reason = refused[1]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        format!(
            "behaviour@0.1.0 is already loaded from {}; a different build must carry a higher \
             version",
            third.display()
        )
    );
}

#[test]
fn versions_of_one_plugin_load_side_by_side_and_a_pin_picks_one() {
    let dir = PluginDir::new();
    dir.add(TEMPLATE_NEXT, "template_next");
    dir.add(TEMPLATE, "template");
    let listing = json(&run_tli(
        dir.path(),
        &["plugins", "list", "--local", "-o", "json"],
    ));
    let versions: Vec<(&str, &str)> = listing["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["version"].as_str().unwrap()))
        .collect();
    assert_eq!(versions, [("template", "0.1.0"), ("template", "0.2.0")]);
    assert!(listing["refused"].as_array().unwrap().is_empty());
    // `train local` takes a pin, and names the versions it has when the pin is not one.
    let out = run_tli(
        dir.path(),
        &[
            "train",
            "local",
            "--plugin",
            "template@0.1.0",
            "--steps",
            "20",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run_tli(
        dir.path(),
        &[
            "train",
            "local",
            "--plugin",
            "template@9.9.9",
            "--steps",
            "20",
        ],
    );
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("version 9.9.9 of plugin template is not loaded; loaded: 0.1.0, 0.2.0"),
        "{text}"
    );
}

#[test]
fn binaries_and_plugins_find_libtorch_by_rpath_and_link_torch_cuda() {
    for artifact in [tli_binary(), library(TEMPLATE)] {
        let out = std::process::Command::new("readelf")
            .arg("-d")
            .arg(&artifact)
            .output()
            .expect("readelf (binutils) runs");
        let dynamic = String::from_utf8_lossy(&out.stdout);
        assert!(
            dynamic.contains("[libtorch_cuda.so]"),
            "{} does not need libtorch_cuda.so:\n{dynamic}",
            artifact.display()
        );
        assert!(
            dynamic
                .lines()
                .any(|l| (l.contains("(RUNPATH)") || l.contains("(RPATH)"))
                    && l.contains("libtorch/lib")),
            "{} has no rpath to libtorch:\n{dynamic}",
            artifact.display()
        );
    }
    // And at run time, with no LD_LIBRARY_PATH, the process maps torch_cuda and sees 2.11.0.
    let dir = PluginDir::new();
    dir.add(TEMPLATE, "template");
    let out = run_tli(dir.path(), &["doctor", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["libtorch"]["torch_cuda_loaded"], true, "{report}");
    let version = report["libtorch"]["version"].as_str().unwrap_or_default();
    assert!(
        version.starts_with("2.11.0"),
        "libtorch version {version:?}"
    );
    assert_eq!(report["plugins"]["plugins"][0]["name"], "template");
}
