//! The GPU: the Vulkan layer, one file per object and lifetime, and the
//! self-test a device passes when it is opened (`selftest`).
pub mod adapter;
pub mod buffer;
pub mod commands;
pub mod device;
pub mod fault;
pub mod float_controls;
pub mod instance;
pub mod pipeline;
pub mod queue;
pub mod selftest;
pub mod spirv;
pub mod transfer;
