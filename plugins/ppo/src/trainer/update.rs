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
        // One minibatch per epoch is the whole rollout: a mean over its rows
        // does not depend on their order, so it is used as it lies, and its
        // advantages are normalized once for all epochs.
        let whole = if mb >= n {
            Some(WholeRollout::new(&batch, &c)?)
        } else {
            None
        };
        // Each minibatch's statistics stay tensors until the update ends:
        // reading a value is one more libtorch call, and the update is mostly calls.
        let mut stats: Vec<Tensor> = Vec::new();
        let mut epochs = 0usize;
        let mut index: Vec<i64> = (0..n as i64).collect();
        for _ in 0..c.update_epochs {
            // Fisher–Yates with the kit Rng.
            for i in (1..n).rev() {
                let j = self.rng.below(i as u64 + 1) as usize;
                index.swap(i, j);
            }
            for chunk in index.chunks(mb) {
                let rows = match &whole {
                    Some(w) => Rows::Whole(w),
                    None => Rows::Some(chunk),
                };
                let (loss, s) =
                    minibatch_loss(&self.net, &batch, rows, &c, clip, vf_clip, self.device)?;
                let grad_norm = self.optimizer.backward_step(&loss, lr, c.max_grad_norm)?;
                let row = grad_norm
                    .f_to_kind(Kind::Float)
                    .and_then(|g| g.f_reshape([1]))
                    .and_then(|g| Tensor::f_cat(&[s, g], 0))
                    .plugin_err("collecting update statistics")?;
                stats.push(row);
            }
            epochs += 1;
            if let Some(target) = c.target_kl {
                let last_kl = match stats.last() {
                    Some(s) => s.f_double_value(&[4]).plugin_err("reading the KL")?,
                    None => 0.0,
                };
                if last_kl > target {
                    break;
                }
            }
        }
        let mut means = [0f64; 7];
        if !stats.is_empty() {
            let mean = Tensor::f_stack(&stats, 0)
                .and_then(|t| t.f_to_kind(Kind::Double))
                .and_then(|t| t.f_mean_dim(0, false, Kind::Double))
                .plugin_err("collecting update statistics")?;
            mean.f_copy_data(&mut means, 7)
                .plugin_err("reading update statistics")?;
        }
        if !means[0].is_finite() {
            return Err(PluginError::other(format!(
                "PPO update {} diverged: the loss is {} (try a lower learning_rate \
                 or reward_scale)",
                self.counters.updates + 1,
                means[0]
            )));
        }
        self.last_update = Some(UpdateStats {
            loss: means[0],
            policy_loss: means[1],
            value_loss: means[2],
            entropy: means[3],
            approx_kl: means[4],
            clip_fraction: means[5],
            grad_norm: means[6],
            explained_variance: explained,
            learning_rate: lr,
            clip_coef: clip,
            epochs: epochs as f64,
        });
        self.rollout.filled = 0;
        self.counters.updates += 1;
        Ok(())
    }
}

/// The whole rollout as one minibatch: its tensors as they are, with the
/// advantages normalized once.
struct WholeRollout {
    advantages: Tensor,
}

impl WholeRollout {
    fn new(batch: &Batch, c: &PpoConfig) -> Result<Self, PluginError> {
        let adv = &batch.advantages;
        let advantages = if c.norm_adv && adv.size()[0] > 1 {
            normalized(adv).plugin_err("normalizing advantages")?
        } else {
            adv.shallow_clone()
        };
        Ok(Self { advantages })
    }
}

/// The rows of a minibatch.
enum Rows<'a> {
    Whole(&'a WholeRollout),
    Some(&'a [i64]),
}

/// `(x − mean) / (std + 1e-8)`.
fn normalized(x: &Tensor) -> Result<Tensor, tch::TchError> {
    let std = x.f_std(true)?;
    x.f_sub(&x.f_mean(Kind::Float)?)?
        .f_div(&std.f_add_scalar(1e-8)?)
}

/// One minibatch's loss (for the backward pass) and, as a tensor, `[loss,
/// policy, value, entropy, approx_kl, clip_fraction]`.
fn minibatch_loss(
    net: &ActorCritic,
    batch: &Batch,
    rows: Rows<'_>,
    c: &PpoConfig,
    clip: f64,
    vf_clip: f64,
    device: Device,
) -> Result<(Tensor, Tensor), PluginError> {
    (|| -> Result<(Tensor, Tensor), tch::TchError> {
        let (obs, actions, old_logp, old_values, returns, adv) = match rows {
            Rows::Whole(whole) => (
                batch.obs.shallow_clone(),
                batch.actions.shallow_clone(),
                batch.log_probs.shallow_clone(),
                batch.values.shallow_clone(),
                batch.returns.shallow_clone(),
                whole.advantages.shallow_clone(),
            ),
            Rows::Some(rows) => {
                let idx = Tensor::f_from_slice(rows)?.f_to_device(device)?;
                let pick = |t: &Tensor| t.f_index_select(0, &idx);
                let mut adv = pick(&batch.advantages)?;
                if c.norm_adv && rows.len() > 1 {
                    adv = normalized(&adv)?;
                }
                (
                    pick(&batch.obs)?,
                    pick(&batch.actions)?,
                    pick(&batch.log_probs)?,
                    pick(&batch.values)?,
                    pick(&batch.returns)?,
                    adv,
                )
            }
        };
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
        let (approx_kl, clip_fraction) =
            tch::no_grad(|| -> Result<(Tensor, Tensor), tch::TchError> {
                // http://joschu.net/blog/kl-approx.html (k3), as CleanRL logs it.
                let kl = ratio
                    .f_sub_scalar(1.0)?
                    .f_sub(&log_ratio)?
                    .f_mean(Kind::Float)?;
                let frac = ratio
                    .f_sub_scalar(1.0)?
                    .f_abs()?
                    .f_gt(clip)?
                    .f_to_kind(Kind::Float)?
                    .f_mean(Kind::Float)?;
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
        let values = tch::no_grad(|| {
            Tensor::f_stack(
                &[
                    loss.detach(),
                    policy_loss.detach(),
                    value_loss.detach(),
                    entropy.detach(),
                    approx_kl,
                    clip_fraction,
                ],
                0,
            )
        })?;
        Ok((loss, values))
    })()
    .plugin_err("PPO minibatch update")
}
