//! One error type for the whole crate. Every failure becomes a readable message
//! naming the Vulkan call and its result, or the file, row or option at fault;
//! it is turned into a Lua error once, at the mlua boundary (`lua_api`).

use ash::vk;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Vulkan call failed: the call and its result code.
    #[error("{call} failed: {result:?}")]
    Vulkan { call: &'static str, result: vk::Result },
    #[error("the GPU device was lost during {call} (driver reset or crash); results of this run are unusable")]
    DeviceLost { call: &'static str },
    #[error("out of {kind} memory in {call}")]
    OutOfMemory { call: &'static str, kind: &'static str },
    #[error("could not load the Vulkan library: {0}")]
    Loader(String),
    #[error("memory allocation failed: {0}")]
    Allocator(String),
    #[error("{0}")]
    Device(String),
    /// Shader compilation or reflection failed (the message names the shader).
    #[error("{0}")]
    Shader(String),
    /// A dispatch or pipeline was used wrongly (sizes, bindings, limits).
    #[error("{0}")]
    Usage(String),
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
}

/// Maps a `vk::Result` from `call` to the right variant; used as
/// `unsafe { device.create_buffer(..) }.map_err(vk_err("vkCreateBuffer"))?`.
pub fn vk_err(call: &'static str) -> impl Fn(vk::Result) -> Error {
    move |result| match result {
        vk::Result::ERROR_DEVICE_LOST => Error::DeviceLost { call },
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => Error::OutOfMemory { call, kind: "device" },
        vk::Result::ERROR_OUT_OF_HOST_MEMORY => Error::OutOfMemory { call, kind: "host" },
        result => Error::Vulkan { call, result },
    }
}

impl From<gpu_allocator::AllocationError> for Error {
    fn from(e: gpu_allocator::AllocationError) -> Self {
        match e {
            gpu_allocator::AllocationError::OutOfMemory => {
                Error::OutOfMemory { call: "gpu-allocator allocate", kind: "device" }
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
