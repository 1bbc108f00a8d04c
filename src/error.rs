//! One error type for the whole crate. Every failure becomes a readable message
//! naming the Vulkan call and its result, or the file, row or option at fault;
//! it is turned into a Lua error once, at the mlua boundary (`lua_api`).
//!
//! The GPU faults are distinct variants whose messages start with what
//! happened, so a user (and a test) can tell them apart: "GPU device lost",
//! "out of device memory" / "out of host memory", "GPU timeout". Misuse of
//! the API (wrong sizes, objects of two contexts, offsets past a buffer) is
//! `Usage`, and its message names the object and the rule broken: the Lua
//! API raises it, and returns every other kind as `nil, message`.

use ash::vk;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Vulkan call failed: the call and its result code.
    #[error("{call} failed: {result:?}")]
    Vulkan { call: &'static str, result: vk::Result },
    #[error("GPU device lost in {call} (driver reset or crash): this context is dead and its results are \
             unusable; open a new context to continue")]
    DeviceLost { call: &'static str },
    /// `what` names the allocation or call (e.g. "buffer 'centroids' of 4096 bytes").
    #[error("out of {kind} memory: {what}")]
    OutOfMemory { what: String, kind: &'static str },
    /// A fence wait passed the context's limit; the work may still be running.
    #[error("GPU timeout: {what} did not finish within {seconds} s (the limit is the context's timeout, \
             DIVGPU_TIMEOUT_S or divgpu.open{{timeout=}}); this context is dead, open a new one to continue")]
    Timeout { what: &'static str, seconds: f64 },
    /// A call on a context after an earlier device loss or timeout.
    #[error("this context is dead after an earlier {0}; open a new context to continue")]
    Dead(&'static str),
    #[error("could not load the Vulkan library: {0}")]
    Loader(String),
    #[error("memory allocation failed: {0}")]
    Allocator(String),
    #[error("{0}")]
    Device(String),
    /// Shader compilation or reflection failed (the message names the shader).
    #[error("{0}")]
    Shader(String),
    /// The API was used wrongly (sizes, bindings, limits, offsets, objects of
    /// two contexts): the message names the object and the rule. The only
    /// kind the Lua API raises; every other is returned as `nil, message`.
    #[error("{0}")]
    Usage(String),
    /// What the files or the system refuse, the message ready: an output
    /// that cannot be written there, a checkpoint whose earlier commit
    /// failed, signal handlers that cannot be installed.
    #[error("{0}")]
    Refused(String),
    /// An input file is wrong: the path and what is wrong with it (row, column).
    #[error("{path}: {msg}")]
    Input { path: String, msg: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn input(path: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Input { path: path.into(), msg: msg.into() }
    }
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
    /// A device loss or a timeout: the GPU may still be using what the
    /// context owns, so the context leaks it instead of freeing it.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Error::DeviceLost { .. } | Error::Timeout { .. } | Error::Dead(_))
    }
}

/// Maps a `vk::Result` from `call` to the right variant; used as
/// `unsafe { device.create_buffer(..) }.map_err(vk_err("vkCreateBuffer"))?`.
pub fn vk_err(call: &'static str) -> impl Fn(vk::Result) -> Error {
    move |result| match result {
        vk::Result::ERROR_DEVICE_LOST => Error::DeviceLost { call },
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => Error::OutOfMemory { what: call.to_string(), kind: "device" },
        vk::Result::ERROR_OUT_OF_HOST_MEMORY => Error::OutOfMemory { what: call.to_string(), kind: "host" },
        result => Error::Vulkan { call, result },
    }
}

impl From<gpu_allocator::AllocationError> for Error {
    fn from(e: gpu_allocator::AllocationError) -> Self {
        match e {
            gpu_allocator::AllocationError::OutOfMemory => {
                Error::OutOfMemory { what: "gpu-allocator allocate".into(), kind: "device" }
            }
            other => Error::Allocator(other.to_string()),
        }
    }
}

#[cfg(feature = "lua")]
impl From<Error> for mlua::Error {
    fn from(e: Error) -> Self {
        mlua::Error::external(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each fault says which it is in its first words (the README lists them).
    #[test]
    fn faults_are_distinct_and_say_which() {
        let lost = vk_err("vkQueueSubmit")(vk::Result::ERROR_DEVICE_LOST).to_string();
        let oom = vk_err("vkAllocateMemory")(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY).to_string();
        let timeout = Error::Timeout { what: "a submission", seconds: 2.0 }.to_string();
        assert!(lost.starts_with("GPU device lost in vkQueueSubmit"), "{lost}");
        assert!(oom.starts_with("out of device memory: vkAllocateMemory"), "{oom}");
        assert!(timeout.starts_with("GPU timeout: a submission did not finish within 2 s"), "{timeout}");
        let other = vk_err("vkCreateBuffer")(vk::Result::ERROR_UNKNOWN).to_string();
        assert!(!other.contains("lost") && !other.contains("memory") && !other.contains("timeout"), "{other}");
        assert!(Error::DeviceLost { call: "x" }.is_fatal());
        assert!(!Error::OutOfMemory { what: "x".into(), kind: "device" }.is_fatal());
    }
}
