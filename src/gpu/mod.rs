//! The GPU: the Vulkan layer, one file per object and lifetime, and the
//! self-test a device passes when it is opened (`selftest`), and the device
//! profile everything plans by (`profile`).
pub mod adapter;
pub mod buffer;
pub mod commands;
pub mod device;
pub mod fault;
pub mod float_controls;
pub mod instance;
pub mod pipeline;
pub mod profile;
pub mod queue;
pub mod selftest;
pub mod spirv;
pub mod transfer;
