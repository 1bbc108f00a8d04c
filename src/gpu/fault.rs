//! Fault injection for the tests: with the cargo feature `fault-injection`
//! (built by `make test` into `build/fault/divgpu.so`, never into the shipped
//! module) `divgpu.inject_fault(kind)` makes the next matching Vulkan event
//! fail as a broken device would: a device lost at the next submit or fence
//! wait, a fence wait that times out, an allocation out of device memory.
//! Without the feature `take` is a constant `false` and compiles away.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// vkQueueSubmit returns VK_ERROR_DEVICE_LOST (nothing is submitted).
    DeviceLostAtSubmit = 1,
    /// The next fence wait returns VK_ERROR_DEVICE_LOST (the work was submitted).
    DeviceLostAtWait = 2,
    /// The next fence wait reports a timeout at once (the work is in flight).
    Timeout = 3,
    /// The next memory allocation returns VK_ERROR_OUT_OF_DEVICE_MEMORY.
    OutOfMemory = 4,
}

#[cfg(feature = "fault-injection")]
mod armed {
    use std::sync::atomic::{AtomicU8, Ordering};

    use super::Fault;
    use crate::error::{Error, Result};

    static ARMED: AtomicU8 = AtomicU8::new(0);

    /// Arms one fault (replacing any armed one); it fires once.
    pub fn arm(kind: &str) -> Result<()> {
        let fault = match kind {
            "device-lost" => Fault::DeviceLostAtWait,
            "device-lost-at-submit" => Fault::DeviceLostAtSubmit,
            "timeout" => Fault::Timeout,
            "out-of-memory" => Fault::OutOfMemory,
            "none" => {
                ARMED.store(0, Ordering::SeqCst);
                return Ok(());
            }
            other => {
                return Err(Error::Usage(format!(
                    "inject_fault: unknown fault '{other}' (device-lost, device-lost-at-submit, timeout, \
                     out-of-memory or none)"
                )))
            }
        };
        ARMED.store(fault as u8, Ordering::SeqCst);
        Ok(())
    }

    pub fn take(fault: Fault) -> bool {
        ARMED.compare_exchange(fault as u8, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }
}

#[cfg(feature = "fault-injection")]
pub use armed::arm;

/// True (once) when `fault` is armed; always false without the feature.
#[inline]
pub fn take(fault: Fault) -> bool {
    #[cfg(feature = "fault-injection")]
    {
        armed::take(fault)
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = fault;
        false
    }
}
