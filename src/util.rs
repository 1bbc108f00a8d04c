//! Small helpers every room shares.

/// Lower-case hex of `bytes` (how every sha256 in divgpu's files is written).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
