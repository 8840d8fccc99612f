//! Connections cannot take a host's file descriptors. A host started with
//! a soft limit of 512 descriptors and a hard limit of 1,024 raises the
//! soft limit to 1,024 and holds at most 768 connections, keeping the rest
//! for its store and checkpoints. Flooded with 2,000 idle TCP connections
//! to its API port and 300 half-sent HTTP requests to its status page, it
//! keeps answering both, and a task training meanwhile keeps checkpointing
//! and completes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};
use tli_e2e_tests::*;
use tli_host::orchestrator::store::Store;
use tli_proto::v1 as pb;
use tli_proto::v1::training_service_client::TrainingServiceClient;

/// Connects to `addr` and returns the stream, or `None` after 2 s.
fn connect(addr: &str) -> Option<TcpStream> {
    let addr = addr.parse().unwrap();
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()
}

/// `GET /api/status` answered within `limit`: the status line.
fn http_get(addr: &str, limit: Duration) -> Option<String> {
    let mut stream = connect(addr)?;
    stream.set_read_timeout(Some(limit)).ok()?;
    stream
        .write_all(b"GET /api/status HTTP/1.1\r\nHost: tli\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply).into_owned();
    text.lines().next().map(str::to_string)
}

#[test]
fn two_thousand_idle_connections_neither_silence_the_host_nor_stop_its_checkpoints() {
    // This test holds 2,300 sockets of its own.
    let mut own = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a struct we own.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut own);
        if own.rlim_cur < 8192 && own.rlim_max >= 8192 {
            own.rlim_cur = 8192;
            libc::setrlimit(libc::RLIMIT_NOFILE, &own);
        }
    }
    let plugins = template_and_behaviour();
    let state = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(tli_binary());
    command
        .args([
            "host",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ui-listen",
            "127.0.0.1:0",
        ])
        .arg("--state-dir")
        .arg(state.path())
        .env("TLI_PLUGIN_DIR", plugins.path())
        .env_remove("LD_LIBRARY_PATH")
        .env("NO_COLOR", "1");
    // SAFETY: only setrlimit (async-signal-safe) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 512,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let tli_testkit::ServeProcess {
        child,
        address,
        log,
    } = tli_testkit::ServeProcess::spawn_with_stdout(command, std::process::Stdio::null(), |_| {
        true
    });
    let server = Server {
        child,
        address,
        log,
    };
    let page = server.status_page();
    // The connection limits are the line after the status page's: wait for it.
    let ready = server.log_once("connections at once");
    assert!(
        ready.contains("at most 768 connections at once (1024 descriptors"),
        "{ready}"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let job = runtime.block_on(async {
        let mut client = TrainingServiceClient::connect(server.endpoint())
            .await
            .unwrap();
        let request = pb::StartTrainingRequest {
            name: "flooded".into(),
            model: Some(pb::ModelSpec {
                steps: 2500,
                config: Some(pb::model_spec::Config::Plugin(pb::PluginConfig {
                    plugin: "behaviour".into(),
                    config_json: r#"{"sleep_ms_per_step":10}"#.into(),
                })),
                ..Default::default()
            }),
            assets: vec![pb::AssetSpec {
                source: Some(pb::asset_spec::Source::Synthetic(pb::SyntheticAsset {
                    rows: 300,
                    seed: 1,
                    ..Default::default()
                })),
                ..Default::default()
            }],
            checkpoint: Some(pb::CheckpointPolicy {
                every_steps: 100,
                every_seconds: 0.0,
                keep: 3,
            }),
            ..Default::default()
        };
        client
            .start_training(request)
            .await
            .unwrap()
            .into_inner()
            .job
            .unwrap()
            .job_id
    });
    let store = Store::open_read_only(state.path()).unwrap();
    let task = store.tasks_of(job as i64).unwrap()[0].id;
    let newest_checkpoint = || {
        store
            .checkpoints(task)
            .unwrap()
            .iter()
            .map(|c| c.step)
            .max()
            .unwrap_or(0)
    };

    // The flood: 2,000 idle connections to the API port, 300 half-sent
    // requests to the status page.
    // A host that stops accepting leaves connects waiting in its backlog:
    // the flood gives up after a minute.
    let started = Instant::now();
    let mut held = Vec::new();
    for i in 0..2300 {
        if started.elapsed() > Duration::from_secs(60) {
            break;
        }
        if i < 2000 {
            held.extend(connect(&server.address));
        } else if let Some(mut s) = connect(&page) {
            let _ = s.write_all(b"GET /api/status HTTP/1.1\r\nHost: tl");
            held.push(s);
        }
    }
    let opened = held.len();
    assert_eq!(
        opened,
        2300,
        "the host stopped taking connections: {opened} of 2,300 in {:?}",
        started.elapsed()
    );
    let before = newest_checkpoint();
    eprintln!("{opened} connections opened in {:?}", started.elapsed());

    // Answers while the flood is held: the CLI over gRPC and the status page.
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let asked = Instant::now();
        let listed = server.client(&["train", "list", "-o", "json", "--timeout", "20"]);
        assert!(listed.status.success(), "{}", stderr(&listed));
        slowest = slowest.max(asked.elapsed());
        let asked = Instant::now();
        let status = http_get(&page, Duration::from_secs(20));
        assert_eq!(
            status.as_deref(),
            Some("HTTP/1.1 200 OK"),
            "the status page"
        );
        slowest = slowest.max(asked.elapsed());
        std::thread::sleep(Duration::from_millis(500));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while newest_checkpoint() <= before {
        assert!(Instant::now() < deadline, "no checkpoint during the flood");
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "{opened} connections held; slowest answer {slowest:?}; checkpoints went on from step \
         {before} to {}",
        newest_checkpoint()
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let row = store.task(task).unwrap().unwrap();
        if row.state.is_finished() {
            assert_eq!(row.state.as_str(), "completed", "{:?}", row.error);
            break;
        }
        assert!(Instant::now() < deadline, "the task did not end");
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = server.log.lock().unwrap().clone();
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(!log.contains("checkpoint failed"), "{log}");
}
