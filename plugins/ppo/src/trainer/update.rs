//! The PPO update: epochs of shuffled minibatches over the full rollout
//! (clipped policy loss, optionally clipped value loss, entropy bonus),
//! global gradient-norm clipping (the kit's, in the fused optimizer step)
//! and the KL early stop.

use super::*;

impl PpoTrainer {
    /// PPO update epochs over the full rollout, then clears it.
    pub(super) fn update(&mut self) -> Result<(), PluginError> {
        let c = self.config.clone();
        let lr = self.learning_rate();
        let clip = c.clip_coef * self.clip_scale();
        let vf_clip = c.vf_clip_coef * self.clip_scale();
        let (_, next_values) = self.policy(&self.obs)?;
        let (adv, returns) = self.rollout.advantages(&next_values, c.gamma, c.gae_lambda);
        let explained = explained_variance(&self.rollout.values, &returns);
        let batch = Batch::new(&self.rollout, &adv, &returns, self.device)?;
        let n = c.batch_size();
        let mb = c.minibatch_size();
        let mut sums = UpdateStats::default();
        let mut minibatches = 0usize;
        let mut epochs = 0usize;
        let mut index: Vec<i64> = (0..n as i64).collect();
        for _ in 0..c.update_epochs {
            // Fisher–Yates with the kit Rng.
            for i in (1..n).rev() {
                let j = self.rng.below(i as u64 + 1) as usize;
                index.swap(i, j);
            }
            let mut last_kl = 0.0;
            for chunk in index.chunks(mb) {
                let (loss, s) =
                    minibatch_loss(&self.net, &batch, chunk, &c, clip, vf_clip, self.device)?;
                if !s[0].is_finite() {
                    return Err(PluginError::other(format!(
                        "PPO update {} diverged: the loss is {} (try a lower learning_rate \
                         or reward_scale)",
                        self.counters.updates + 1,
                        s[0]
                    )));
                }
                let grad_norm = self
                    .optimizer
                    .backward_step(&loss, lr, c.max_grad_norm)?
                    .f_double_value(&[])
                    .plugin_err("reading the gradient norm")?;
                sums.loss += s[0];
                sums.policy_loss += s[1];
                sums.value_loss += s[2];
                sums.entropy += s[3];
                sums.approx_kl += s[4];
                sums.clip_fraction += s[5];
                sums.grad_norm += grad_norm;
                last_kl = s[4];
                minibatches += 1;
            }
            epochs += 1;
            if c.target_kl.is_some_and(|t| last_kl > t) {
                break;
            }
        }
        let k = minibatches.max(1) as f64;
        self.last_update = Some(UpdateStats {
            loss: sums.loss / k,
            policy_loss: sums.policy_loss / k,
            value_loss: sums.value_loss / k,
            entropy: sums.entropy / k,
            approx_kl: sums.approx_kl / k,
            clip_fraction: sums.clip_fraction / k,
            grad_norm: sums.grad_norm / k,
            explained_variance: explained,
            learning_rate: lr,
            clip_coef: clip,
            epochs: epochs as f64,
        });
        self.rollout.filled = 0;
        self.counters.updates += 1;
        let every = self.config.valid_metrics_interval;
        if every == 0 || self.counters.transitions / every > self.valid_walk_at / every {
            self.walk_validation()?;
        }
        Ok(())
    }
}

/// One minibatch's loss (for the backward pass) and `[loss, policy, value,
/// entropy, approx_kl, clip_fraction]`.
fn minibatch_loss(
    net: &ActorCritic,
    batch: &Batch,
    rows: &[i64],
    c: &PpoConfig,
    clip: f64,
    vf_clip: f64,
    device: Device,
) -> Result<(Tensor, [f64; 6]), PluginError> {
    (|| -> Result<(Tensor, [f64; 6]), tch::TchError> {
        let idx = Tensor::f_from_slice(rows)?.f_to_device(device)?;
        let obs = batch.obs.f_index_select(0, &idx)?;
        let actions = batch.actions.f_index_select(0, &idx)?;
        let old_logp = batch.log_probs.f_index_select(0, &idx)?;
        let old_values = batch.values.f_index_select(0, &idx)?;
        let returns = batch.returns.f_index_select(0, &idx)?;
        let mut adv = batch.advantages.f_index_select(0, &idx)?;
        if c.norm_adv && rows.len() > 1 {
            let std = adv.f_std(true)?;
            adv = adv
                .f_sub(&adv.f_mean(Kind::Float)?)?
                .f_div(&std.f_add_scalar(1e-8)?)?;
        }
        let (logp_all, value) = net.forward(&obs)?;
        let logp = logp_all
            .f_gather(1, &actions.f_unsqueeze(1)?, false)?
            .f_squeeze_dim(1)?;
        let entropy = logp_all
            .f_exp()?
            .f_mul(&logp_all)?
            .f_sum_dim_intlist(-1, false, Kind::Float)?
            .f_mean(Kind::Float)?
            .f_neg()?;
        let log_ratio = logp.f_sub(&old_logp)?;
        let ratio = log_ratio.f_exp()?;
        let (approx_kl, clip_fraction) = tch::no_grad(|| -> Result<(f64, f64), tch::TchError> {
            // http://joschu.net/blog/kl-approx.html (k3), as CleanRL logs it.
            let kl = ratio
                .f_sub_scalar(1.0)?
                .f_sub(&log_ratio)?
                .f_mean(Kind::Float)?
                .f_double_value(&[])?;
            let frac = ratio
                .f_sub_scalar(1.0)?
                .f_abs()?
                .f_gt(clip)?
                .f_to_kind(Kind::Float)?
                .f_mean(Kind::Float)?
                .f_double_value(&[])?;
            Ok((kl, frac))
        })?;
        let pg1 = adv.f_neg()?.f_mul(&ratio)?;
        let pg2 = adv
            .f_neg()?
            .f_mul(&ratio.f_clamp(1.0 - clip, 1.0 + clip)?)?;
        let policy_loss = pg1.f_maximum(&pg2)?.f_mean(Kind::Float)?;
        let unclipped = value.f_sub(&returns)?.f_square()?;
        let value_loss = if c.clip_vloss {
            let clipped = old_values
                .f_add(&value.f_sub(&old_values)?.f_clamp(-vf_clip, vf_clip)?)?
                .f_sub(&returns)?
                .f_square()?;
            unclipped
                .f_maximum(&clipped)?
                .f_mean(Kind::Float)?
                .f_mul_scalar(0.5)?
        } else {
            unclipped.f_mean(Kind::Float)?.f_mul_scalar(0.5)?
        };
        let loss = policy_loss
            .f_sub(&entropy.f_mul_scalar(c.ent_coef)?)?
            .f_add(&value_loss.f_mul_scalar(c.vf_coef)?)?;
        let values = [
            loss.f_double_value(&[])?,
            policy_loss.f_double_value(&[])?,
            value_loss.f_double_value(&[])?,
            entropy.f_double_value(&[])?,
            approx_kl,
            clip_fraction,
        ];
        Ok((loss, values))
    })()
    .plugin_err("PPO minibatch update")
}
