//! A contiguous CPU tensor's elements as a Rust slice, for plain loops over
//! buffers a plugin owns (the INT8 optimizer's host update, DQN's CPU
//! gradient pass, [`FlatAdamW::apply_on_cpu`](crate::flat_adamw::FlatAdamW::apply_on_cpu)),
//! where a libtorch operation's dispatch would cost more than its arithmetic.

use tch::{Device, Kind, Tensor};
use tli_plugin_api::PluginError;

/// Element types a tensor can be viewed as, with their libtorch kind.
pub trait HostElement {
    const KIND: Kind;
}
impl HostElement for f32 {
    const KIND: Kind = Kind::Float;
}
impl HostElement for i64 {
    const KIND: Kind = Kind::Int64;
}
impl HostElement for i8 {
    const KIND: Kind = Kind::Int8;
}
impl HostElement for u8 {
    const KIND: Kind = Kind::Uint8;
}

/// The elements of `t`, read-only. Refuses a tensor that is not a
/// contiguous CPU tensor of `T`'s kind.
///
/// # Safety
/// Nothing may write `t`'s elements while the slice lives.
pub unsafe fn host_slice<T: HostElement>(t: &Tensor) -> Result<&[T], PluginError> {
    check::<T>(t)?;
    if t.numel() == 0 {
        return Ok(&[]);
    }
    // SAFETY: a contiguous CPU tensor of `numel` elements of `T` (checked);
    // no writer is the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(t.data_ptr() as *const T, t.numel()) })
}

/// The elements of `t`, writable. Refuses a tensor that is not a contiguous
/// CPU tensor of `T`'s kind.
///
/// # Safety
/// Nothing else may read or write `t`'s elements (through another tensor
/// sharing its storage, or another slice) while the slice lives.
#[allow(clippy::mut_from_ref)]
pub unsafe fn host_slice_mut<T: HostElement>(t: &Tensor) -> Result<&mut [T], PluginError> {
    check::<T>(t)?;
    if t.numel() == 0 {
        return Ok(&mut []);
    }
    // SAFETY: as above; exclusivity is the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut T, t.numel()) })
}

fn check<T: HostElement>(t: &Tensor) -> Result<(), PluginError> {
    if t.device() == Device::Cpu && t.kind() == T::KIND && t.is_contiguous() {
        return Ok(());
    }
    Err(PluginError::other(format!(
        "expected a contiguous CPU {:?} tensor for a host loop, got a {:?} tensor on {:?} \
         (contiguous: {}); this path needs the model on the CPU",
        T::KIND,
        t.kind(),
        t.device(),
        t.is_contiguous(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_see_the_tensor_and_refuse_other_kinds_and_layouts() {
        let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).reshape([2, 2]);
        // SAFETY: `t` is this test's own tensor, nothing else touches it.
        unsafe { host_slice_mut::<f32>(&t).unwrap()[3] = 9.0 };
        // SAFETY: as above.
        let read = unsafe { host_slice::<f32>(&t).unwrap() };
        assert_eq!(read, &[1.0, 2.0, 3.0, 9.0]);
        // SAFETY: refused before any slice is made.
        assert!(unsafe { host_slice::<i64>(&t) }.is_err());
        let transposed = t.transpose(0, 1);
        // SAFETY: as above.
        assert!(unsafe { host_slice::<f32>(&transposed) }.is_err());
    }
}
