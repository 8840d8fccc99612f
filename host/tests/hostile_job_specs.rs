//! Hostile job specs, generated (the reliability suite, docs/reliability.md): a valid job-spec file with every
//! field present is mutated — one field replaced by a random JSON value
//! (huge, negative and fractional numbers, wrong types, nested arrays and
//! objects), by 200 000-deep nesting, a 200 000-element array or a string
//! megabytes long; a field removed; an unknown field added; or the text's
//! bytes flipped, cut, inserted — and parsed as `tli host run --submit` and
//! `tli train start --spec` do ([`JobSpec::from_json`]). An accepted spec
//! then goes where a submitted job goes next: its features through the
//! feature pipeline, on a small bar table.
//!
//! Every case must: not panic (nor overflow the stack); answer within
//! [`TIME_LIMIT`]; hold at most 64 × the text + 64 MiB at its peak (counted
//! by this binary's allocator); if refused, name the field that was changed
//! (or the unknown field's name) in a message of at most about 1 000
//! characters. `PROPTEST_CASES` sets the cases (64 here; `scripts/fuzz-inputs.sh`
//! runs thousands); each property prints a `hostile-inputs …` summary line.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};
use tli_data::contracts::ContractBook;
use tli_data::features::build_annotated_dataset;
use tli_data::{BarInterval, BarTable};
use tli_host::orchestrator::job::{JobSpec, MAX_MESSAGE_CHARS};

const CI_CASES: u32 = 64;
/// One parse (and the feature pipeline after it) may take at most this long.
const TIME_LIMIT: Duration = Duration::from_secs(10);

// ----- counting allocator (per thread, as in market-data/tests/hostile_files) --------

struct Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

thread_local! {
    // Const-initialized and without a destructor: usable inside the allocator.
    static METER: (Cell<bool>, Cell<usize>, Cell<usize>) =
        const { (Cell::new(false), Cell::new(0), Cell::new(0)) };
}

fn note(grow: usize, shrink: usize) {
    let _ = METER.try_with(|(on, live, peak)| {
        if on.get() {
            let now = live.get().saturating_add(grow).saturating_sub(shrink);
            live.set(now);
            peak.set(peak.get().max(now));
        }
    });
}

// SAFETY: every call is passed on unchanged to the system allocator; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size(), 0);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(0, layout.size());
        // SAFETY: `ptr` came from the system allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; `new_size` is the caller's, checked by the caller.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size, layout.size());
        }
        p
    }
}

// ----- the valid spec and where it can be changed ------------------------------------------

/// A valid spec with every field present (the `orchestrator::job` example, filled in).
fn base() -> Value {
    json!({
        "name": "es-nq-sweep",
        "models": [
            {"plugin": "template", "steps": 2000, "config": {"hidden_sizes": [64, 64]},
             "priority": 0, "pooled": false},
            {"plugin": "tft", "steps": 2000, "config": {"hidden": 32}, "priority": 1, "pooled": true}
        ],
        "assets": [
            {"data": "data/samples/es_proxy_sp500_1d.dbn.zst"},
            {"data": "data/samples/nq_proxy_nasdaq_1d.parquet"},
            {"synthetic": {"rows": 20000, "seed": 3, "sigma": 0.01}}
        ],
        "seed": 7,
        "device": "cpu",
        "features": {
            "return_horizons": [1, 5, 20], "volatility_window": 20, "volume_window": 20,
            "target_horizons": [1, 5], "valid_fraction": 0.15, "test_fraction": 0.15, "embargo": 5
        },
        "checkpoint": {"every_steps": 500, "every_seconds": 300, "keep": 3},
        "slice_steps": 10,
        "executor": "slurm",
        "slurm": {"gpus_per_task": 1, "time_limit_minutes": 120}
    })
}

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    At(usize),
}

/// Every position below the root (`values`) and every object (`objects`, root included).
fn positions(
    v: &Value,
    here: &mut Vec<Seg>,
    values: &mut Vec<Vec<Seg>>,
    objects: &mut Vec<Vec<Seg>>,
) {
    let children: Vec<(Seg, &Value)> = match v {
        Value::Object(map) => {
            objects.push(here.clone());
            map.iter().map(|(k, v)| (Seg::Key(k.clone()), v)).collect()
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (Seg::At(i), v))
            .collect(),
        _ => Vec::new(),
    };
    for (seg, child) in children {
        here.push(seg);
        values.push(here.clone());
        positions(child, here, values, objects);
        here.pop();
    }
}

fn at_mut<'a>(mut v: &'a mut Value, path: &[Seg]) -> &'a mut Value {
    for seg in path {
        v = match seg {
            Seg::Key(k) => &mut v[k.as_str()],
            Seg::At(i) => &mut v[*i],
        };
    }
    v
}

/// The word a refusal of a change at `path` must contain: the last key on it.
fn field_word(path: &[Seg]) -> String {
    path.iter()
        .rev()
        .find_map(|s| match s {
            Seg::Key(k) => Some(k.clone()),
            Seg::At(_) => None,
        })
        .unwrap_or_default()
}

// ----- hostile values ------------------------------------------------------------------------

fn leaf() -> impl Strategy<Value = Value> {
    // Zero, signs, the edges of u32, i64 and u64, overflow, fractions, −0, subnormals.
    let numbers: Vec<Value> = serde_json::from_str(
        "[0, -1, 1, 63, 64, 65, 1025, 10000001, 4294967296, -9223372036854775808, \
         9223372036854775807, 18446744073709551615, 1e308, -1e308, 0.5, -0.0, 1e-320]",
    )
    .expect("numbers");
    let words: Vec<Value> = serde_json::from_str(
        r#"["", " ", "cpu", "cuda", "cuda:9999", "slurm", "local", "template",
            "../../etc/passwd", "\u0000", "é", "🦀", "null", "1"]"#,
    )
    .expect("words");
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        3 => prop::sample::select(numbers),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(Value::from), // NaN and infinities become null
        1 => prop::sample::select(words),
        1 => "[a-z_]{0,12}".prop_map(Value::from),
    ]
}

fn hostile_json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[derive(Clone, Debug)]
enum Hostile {
    Json(Value),
    /// `[[[…]]]` this deep.
    Deep(usize),
    /// An array of this many 1s.
    LongArray(usize),
    /// A string of this many bytes.
    LongString(usize),
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        8 => hostile_json().prop_map(Hostile::Json),
        1 => (1usize..200_000).prop_map(Hostile::Deep),
        1 => (1usize..200_000).prop_map(Hostile::LongArray),
        1 => (1usize..(2 << 20)).prop_map(Hostile::LongString),
    ]
}

const DEEP: &str = "@@deep@@";

impl Hostile {
    fn value(&self) -> Value {
        match self {
            Hostile::Json(v) => v.clone(),
            Hostile::Deep(_) => Value::from(DEEP),
            Hostile::LongArray(n) => Value::Array(vec![json!(1); *n]),
            Hostile::LongString(n) => Value::from("x".repeat(*n)),
        }
    }

    /// The spec's text with this value in place.
    fn render(&self, spec: &Value) -> String {
        let text = spec.to_string();
        match self {
            Hostile::Deep(depth) => text.replace(
                &format!("\"{DEEP}\""),
                &("[".repeat(*depth) + &"]".repeat(*depth)),
            ),
            _ => text,
        }
    }
}

#[derive(Clone, Debug)]
enum Change {
    Replace(Index, Hostile),
    Remove(Index),
    AddField(Index, String, Hostile),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        6 => (any::<Index>(), hostile()).prop_map(|(i, h)| Change::Replace(i, h)),
        2 => any::<Index>().prop_map(Change::Remove),
        1 => (any::<Index>(), "[a-z_]{1,12}", hostile()).prop_map(|(i, k, h)| Change::AddField(i, k, h)),
    ]
}

/// The changed spec's text and the word its refusal must contain.
fn apply(change: &Change) -> (String, String) {
    let mut spec = base();
    let (mut values, mut objects) = (Vec::new(), Vec::new());
    positions(&spec, &mut Vec::new(), &mut values, &mut objects);
    match change {
        Change::Replace(i, hostile) => {
            let path = i.get(&values);
            *at_mut(&mut spec, path) = hostile.value();
            (hostile.render(&spec), field_word(path))
        }
        Change::Remove(i) => {
            let path = i.get(&values);
            let (last, parent) = path.split_last().expect("below the root");
            match (at_mut(&mut spec, parent), last) {
                (Value::Object(map), Seg::Key(k)) => drop(map.remove(k)),
                (Value::Array(items), Seg::At(k)) => drop(items.remove(*k)),
                _ => unreachable!("paths follow the tree"),
            }
            (spec.to_string(), field_word(path))
        }
        Change::AddField(i, key, hostile) => {
            let path = i.get(&objects);
            if let Value::Object(map) = at_mut(&mut spec, path) {
                map.insert(key.clone(), hostile.value());
            }
            (hostile.render(&spec), key.clone())
        }
    }
}

// ----- the guarded parse ------------------------------------------------------------------------

/// What a guarded parse reports: the parse's result (`Err` = refused, with
/// the message), or the panic's message.
type Parsed = Result<Result<(), String>, String>;

fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(CI_CASES),
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    }
}

/// A small daily bar table for the feature pipeline.
fn bars() -> BarTable {
    let mut t = BarTable::new("ES", BarInterval::Day);
    let mut price = 100.0_f64;
    for i in 0..400i64 {
        let next = price * (1.0 + 0.01 * ((i * 7919 % 13) as f64 - 6.0) / 6.0);
        t.push(
            i * 86_400_000_000_000,
            price,
            price.max(next) * 1.001,
            price.min(next) * 0.999,
            next,
            1000 + (i as u64 * 31) % 500,
        );
        price = next;
    }
    t
}

/// Parses `text` on its own thread (panics caught, time limited, bytes
/// counted); an accepted spec's features then go through the feature
/// pipeline. Returns the parse result, or fails the case.
fn parse_guarded(text: String, stats: &Stats) -> Result<Result<(), String>, TestCaseError> {
    let len = text.len();
    let (tx, rx) = std::sync::mpsc::channel::<(Parsed, usize, Duration)>();
    std::thread::Builder::new()
        .name("hostile-spec".into())
        .spawn(move || {
            let started = Instant::now();
            METER.with(|(on, live, peak)| {
                live.set(0);
                peak.set(0);
                on.set(true);
            });
            let outcome = std::panic::catch_unwind(|| {
                let spec = JobSpec::from_json(&text).map_err(|e| e.to_string())?;
                let _ = spec.task_plan();
                let book = ContractBook::builtin();
                let contract = book.lookup("ES").map_err(|e| e.to_string())?;
                // Refusing is fine (it names the feature setting); panicking is not.
                let _ = build_annotated_dataset(&bars(), contract, &spec.features);
                Ok(())
            })
            .map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            });
            let peak = METER.with(|(on, _, peak)| {
                on.set(false);
                peak.get()
            });
            let _ = tx.send((outcome, peak, started.elapsed()));
        })
        .map_err(|e| TestCaseError::fail(format!("cannot start a thread: {e}")))?;
    let Ok((outcome, peak, elapsed)) = rx.recv_timeout(TIME_LIMIT) else {
        stats.hangs.set(stats.hangs.get() + 1);
        return Err(TestCaseError::fail(format!(
            "no answer within {TIME_LIMIT:?}"
        )));
    };
    stats.cases.set(stats.cases.get() + 1);
    stats.peak.set(stats.peak.get().max(peak));
    stats.slowest.set(stats.slowest.get().max(elapsed));
    let outcome = outcome.map_err(|panic| {
        stats.panics.set(stats.panics.get() + 1);
        TestCaseError::fail(format!("panicked: {panic}"))
    })?;
    let bound = len.saturating_mul(64).saturating_add(64 << 20);
    if peak > bound {
        return Err(TestCaseError::fail(format!(
            "a {len}-byte spec allocated {peak} bytes at its peak (bound {bound})"
        )));
    }
    match &outcome {
        Ok(()) => stats.accepted.set(stats.accepted.get() + 1),
        Err(message) => {
            stats.refused.set(stats.refused.get() + 1);
            if message.chars().count() > MAX_MESSAGE_CHARS + 40 {
                return Err(TestCaseError::fail(format!(
                    "refusal is {} bytes long",
                    message.len()
                )));
            }
        }
    }
    Ok(outcome)
}

#[derive(Default)]
struct Stats {
    cases: Cell<u64>,
    accepted: Cell<u64>,
    refused: Cell<u64>,
    panics: Cell<u64>,
    hangs: Cell<u64>,
    peak: Cell<usize>,
    slowest: Cell<Duration>,
}

impl Stats {
    fn print(&self, name: &str) {
        println!(
            "hostile-inputs {name}: cases {} read {} refused {} panics {} hangs {} \
             peak-alloc {:.1} MiB slowest {} ms",
            self.cases.get(),
            self.accepted.get(),
            self.refused.get(),
            self.panics.get(),
            self.hangs.get(),
            self.peak.get() as f64 / f64::from(1 << 20),
            self.slowest.get().as_millis()
        );
    }
}

fn run<S: Strategy>(
    name: &str,
    strategy: S,
    test: impl Fn(S::Value, &Stats) -> Result<(), TestCaseError>,
) {
    let stats = Stats::default();
    let result = TestRunner::new(config()).run(&strategy, |case| test(case, &stats));
    stats.print(name);
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

#[test]
fn changed_fields_are_refused_by_name() {
    run("job-spec-fields", change(), |change, stats| {
        let (text, word) = apply(&change);
        match parse_guarded(text, stats)? {
            Err(message) if !message.contains(&word) => Err(TestCaseError::fail(format!(
                "the refusal does not name {word:?}: {message}"
            ))),
            _ => Ok(()),
        }
    });
}

#[test]
fn damaged_spec_text_is_refused() {
    let text = base().to_string();
    let edit = prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| (i, Some(b), false)),
        any::<Index>().prop_map(|i| (i, None, true)),
        any::<Index>().prop_map(|i| (i, None, false)),
    ];
    run(
        "job-spec-text",
        prop::collection::vec(edit, 1..4),
        |edits, stats| {
            let mut bytes = text.clone().into_bytes();
            for (at, byte, cut) in edits {
                let i = at.index(bytes.len() + 1);
                match (byte, cut) {
                    (Some(b), _) if i < bytes.len() => bytes[i] = b, // set a byte
                    (None, true) => bytes.truncate(i),               // cut the file
                    (None, false) if i < bytes.len() => drop(bytes.remove(i)), // drop a byte
                    _ => {}
                }
            }
            // `--submit` reads the file as UTF-8 first; what is not, never gets here.
            let Ok(text) = String::from_utf8(bytes) else {
                return Ok(());
            };
            match parse_guarded(text, stats)? {
                Err(message) if message.trim().is_empty() => {
                    Err(TestCaseError::fail("an empty refusal".to_string()))
                }
                _ => Ok(()),
            }
        },
    );
}

// ----- the defects found, pinned ------------------------------------------------------

/// A guarded parse of `text` that must be refused; returns the message.
fn refusal(text: String) -> String {
    match parse_guarded(text, &Stats::default()) {
        Ok(Err(message)) => message,
        Ok(Ok(())) => panic!("accepted"),
        Err(e) => panic!("{e}"),
    }
}

fn with(path: &[&str], value: Value) -> String {
    let mut spec = base();
    let mut at = &mut spec;
    for key in path {
        at = &mut at[*key];
    }
    *at = value;
    spec.to_string()
}

/// Found by `changed_fields_are_refused_by_name`: serde's type errors gave a
/// line and column but no field ("invalid type: string \"x\", expected u64
/// at line 1 column 57").
#[test]
fn type_errors_name_the_field() {
    let mut spec = base();
    spec["models"][1]["steps"] = json!("x");
    let message = refusal(spec.to_string());
    assert!(
        message.contains("job spec: models[1].steps: invalid type"),
        "{message}"
    );
    let message = refusal(with(&["features", "volume_window"], json!(-3)));
    assert!(message.contains("features.volume_window"), "{message}");
}

/// Found by `changed_fields_are_refused_by_name`: a refused string was
/// quoted whole (a 2 MiB seed gave a 2 MiB message).
#[test]
fn huge_refused_values_are_quoted_briefly() {
    let message = refusal(with(&["seed"], json!("x".repeat(2 << 20))));
    assert!(
        message.starts_with("job spec: seed: invalid type"),
        "{message}"
    );
    assert!(message.chars().count() < MAX_MESSAGE_CHARS + 40);
}

/// Found by review, pinned here: the task count was the length of the
/// planned task list, so 40 000 models × 40 000 assets (3 MB of JSON)
/// planned 1.6 billion tasks (38 GB) before refusing them.
#[test]
fn billions_of_tasks_are_counted_not_planned() {
    let models = vec![json!({"plugin": "template", "steps": 10}); 40_000];
    let assets = vec![json!({"synthetic": {"rows": 100}}); 40_000];
    let mut spec = with(&["models"], json!(models));
    spec = {
        let mut v: Value = serde_json::from_str(&spec).expect("json");
        v["assets"] = json!(assets);
        v.to_string()
    };
    let message = refusal(spec);
    assert!(
        message.contains("1600000000 tasks (models × assets)"),
        "{message}"
    );
}

/// Found by review of what `changed_fields_are_refused_by_name` feeds the
/// feature pipeline: an embargo near `usize::MAX` wrapped the split
/// arithmetic around and the pipeline panicked on a slice.
#[test]
fn a_huge_embargo_is_refused_not_a_panic() {
    let spec =
        JobSpec::from_json(&with(&["features", "embargo"], json!(u64::MAX))).expect("parses");
    let book = ContractBook::builtin();
    let e = build_annotated_dataset(&bars(), book.lookup("ES").expect("ES"), &spec.features)
        .expect_err("refused");
    assert!(
        e.to_string().contains("too few for the splits and embargo"),
        "{e}"
    );
}

/// Found by review, pinned here: 200 000 return horizons are 200 000
/// feature columns of every row.
#[test]
fn too_many_horizons_are_refused() {
    // By the spec, when it is read (nothing is submitted)...
    let e = JobSpec::from_json(&with(
        &["features", "return_horizons"],
        json!(vec![1; 200_000]),
    ))
    .expect_err("refused");
    assert!(
        e.to_string()
            .contains("features: return_horizons lists 200000 horizons; at most 64"),
        "{e}"
    );
    // ...and by the pipeline, for a config that did not come through a spec.
    let features = tli_data::features::FeatureConfig {
        return_horizons: vec![1; 200_000],
        ..Default::default()
    };
    let book = ContractBook::builtin();
    let e = build_annotated_dataset(&bars(), book.lookup("ES").expect("ES"), &features)
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("return_horizons lists 200000 horizons; at most 64"),
        "{e}"
    );
}

/// 100 000 nested `[` neither overflow the stack nor go unnamed.
#[test]
fn deep_nesting_is_refused_by_name() {
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    let text = with(&["models"], json!(DEEP)).replace(&format!("\"{DEEP}\""), &deep);
    let message = refusal(text);
    assert!(message.contains("job spec: models"), "{message}");
}
