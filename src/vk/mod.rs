//! The Vulkan layer: one file per object and lifetime.
pub mod buffer;
pub mod commands;
pub mod context;
pub mod fault;
pub mod float_controls;
pub mod pipeline;
pub mod queue;
pub mod spirv;
pub mod transfer;
