//! The Vulkan layer: one file per object and lifetime.
pub mod adapter;
pub mod buffer;
pub mod commands;
pub mod device;
pub mod fault;
pub mod float_controls;
pub mod instance;
pub mod pipeline;
pub mod queue;
pub mod spirv;
pub mod transfer;
