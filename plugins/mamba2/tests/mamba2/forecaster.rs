//! The plugin's forecaster (input projection → stack → multi-horizon head):
//! the streaming `step` over new bars gives the forecasts of the windowed
//! forward pass, bar by bar; forecasts are causal; weight decay spares the
//! SSM's own parameters.

use crate::common::{randn, rel_err};
use tch::{Device, Kind, Tensor};
use tli_plugin_kit::nn::Parameters;
use tli_plugin_kit::rng::Rng;
use tli_plugin_mamba2::config::ForecasterConfig;
use tli_plugin_mamba2::model::{is_decayed, Forecaster};
use tli_plugin_mamba2::StackState;

fn forecaster() -> Forecaster {
    let config = ForecasterConfig::parse(
        r#"{"d_model": 16, "layers": 2, "d_state": 8, "headdim": 8, "chunk_size": 8,
            "horizons": 3, "quantiles": [0.1, 0.5, 0.9], "lookback": 40}"#,
    )
    .unwrap();
    Forecaster::new(&config, 5, &mut Rng::new(3), Device::Cpu).unwrap()
}

#[test]
fn streaming_step_gives_the_windowed_forecasts_bar_by_bar() {
    let model = forecaster();
    let x = randn(&mut Rng::new(9), &[2, 37, 5], Kind::Float);
    let windowed = tch::no_grad(|| model.forward(&x, 37, None).unwrap());
    assert_eq!(windowed.size(), [2, 37, 3, 3]);
    let mut state = StackState::zeros(&model.stack, 2).unwrap();
    for t in 0..37 {
        let step = tch::no_grad(|| model.step(&x.select(1, t), &mut state).unwrap());
        let e = rel_err(&step, &windowed.select(1, t));
        assert!(e < 1e-5, "bar {t}: relative error {e:e}");
    }
}

#[test]
fn forecasts_never_read_later_bars() {
    let model = forecaster();
    let x = randn(&mut Rng::new(4), &[1, 30, 5], Kind::Float);
    let changed = x.copy();
    let _ = changed.narrow(1, 20, 10).fill_(7.0);
    let a = tch::no_grad(|| model.forward(&x, 30, None).unwrap());
    let b = tch::no_grad(|| model.forward(&changed, 30, None).unwrap());
    let before = |t: &Tensor| t.narrow(1, 0, 20);
    assert_eq!(rel_err(&before(&b), &before(&a)), 0.0);
    assert!(rel_err(&b.narrow(1, 20, 10), &a.narrow(1, 20, 10)) > 1e-3);
}

#[test]
fn weight_decay_spares_biases_norms_and_the_ssm_parameters() {
    let model = forecaster();
    let names: Vec<String> = model
        .named_parameters("")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let decayed: Vec<&String> = names.iter().filter(|n| is_decayed(n)).collect();
    for n in &names {
        let spared =
            n.ends_with("bias") || n.ends_with("A_log") || n.ends_with(".D") || n.contains("norm");
        assert_eq!(is_decayed(n), !spared, "{n}");
    }
    assert!(decayed.iter().any(|n| n.ends_with("in_proj.weight")));
    assert!(decayed.iter().any(|n| n.ends_with("conv1d.weight")));
    let (a, b) = model.decay_groups();
    assert_eq!(a.len() + b.len(), names.len());
    let counted = Forecaster::parameter_count_for(
        &ForecasterConfig::parse(
            r#"{"d_model": 16, "layers": 2, "d_state": 8, "headdim": 8, "chunk_size": 8,
                "horizons": 3, "quantiles": [0.1, 0.5, 0.9], "lookback": 40}"#,
        )
        .unwrap(),
        5,
    );
    assert_eq!(counted, model.parameter_count());
}

/// The chunked forward against the recurrence and the streaming step on the
/// device at hand (CUDA when this process sees one, else the CPU): a 2-layer
/// stack, 300 bars (not a multiple of the chunk), f32. `scripts/gpu-check.sh`
/// runs this on the GPU.
#[test]
fn chunked_recurrent_and_streaming_agree_on_the_available_device() {
    use tli_plugin_mamba2::{Mamba2Config, Mamba2Stack};
    let device = if tch::Cuda::is_available() {
        Device::Cuda(0)
    } else {
        Device::Cpu
    };
    let config = Mamba2Config {
        d_state: 16,
        headdim: 16,
        ..Mamba2Config::new(32)
    };
    let stack = Mamba2Stack::new(&config, 2, &mut Rng::new(5), device).unwrap();
    let x = randn(&mut Rng::new(6), &[3, 300, 32], Kind::Float).to_device(device);
    let (chunked, sequential) = tch::no_grad(|| {
        (
            stack.forward(&x, 64).unwrap(),
            stack.forward_sequential(&x).unwrap(),
        )
    });
    let e = rel_err(&chunked, &sequential);
    let mut state = StackState::zeros(&stack, 3).unwrap();
    let mut worst_step: f64 = 0.0;
    for t in 0..300 {
        let y = tch::no_grad(|| stack.step(&x.select(1, t), &mut state).unwrap());
        worst_step = worst_step.max(rel_err(&y, &chunked.select(1, t)));
    }
    eprintln!(
        "{device:?}: chunked vs recurrence {e:.2e}, streaming step vs chunked {worst_step:.2e}"
    );
    // cuDNN may run the convolution in TF32 on a GPU: a looser bound there.
    let bound = if device == Device::Cpu { 1e-4 } else { 2e-3 };
    assert!(e < bound && worst_step < bound, "{e:e} / {worst_step:e}");
}
