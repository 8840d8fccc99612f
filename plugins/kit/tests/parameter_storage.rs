//! A parameter made by the kit owns its storage: when an optimizer gives it
//! new storage (`set_data`, as the flat FP32 layout and the INT8 release
//! do), the old f32 values are freed. A reshaped view would keep its base
//! alive, and with it a whole f32 copy of the model (seen as one extra
//! parameters-sized block of RSS at hidden 512–1024).
//!
//! Measured in RSS, so this file holds one test: its own process, nothing
//! else allocating meanwhile.

use tch::{Device, Kind, Tensor};
use tli_plugin_kit::nn::leaf_from_values;

fn rss_mib() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS"))?;
    Some(line.split_whitespace().nth(1)?.parse::<i64>().ok()? / 1024)
}

#[test]
fn replacing_a_parameters_storage_frees_its_values() {
    let n = 64 << 20; // 256 MiB of f32
    let mut param = {
        let values = vec![0.5f32; n];
        leaf_from_values(&values, &[8192, (n / 8192) as i64], Device::Cpu).unwrap()
    };
    assert!(param.requires_grad());
    assert_eq!(param.size(), [8192, (n / 8192) as i64]);
    assert_eq!(param.double_value(&[17, 3]), 0.5);
    let Some(before) = rss_mib() else {
        return; // no /proc here: nothing to measure
    };
    let empty = Tensor::empty([0], (Kind::Float, Device::Cpu));
    tch::no_grad(|| param.set_data(&empty));
    let after = rss_mib().unwrap();
    assert!(
        before - after > 200,
        "RSS {before} MiB → {after} MiB: the parameter's old storage is still held"
    );
}
