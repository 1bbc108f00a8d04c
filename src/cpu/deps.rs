//! Everything `cpu/` takes from the rest of the crate, in one place (the
//! contract's table, its Gram certificate, the mirror for the tests), so a
//! move of those modules changes only these lines.

pub use crate::contract::gram;
pub use crate::contract::table::Table;
pub use crate::error::{Error, Result};

#[cfg(test)]
pub use crate::contract::mirror;
#[cfg(test)]
pub use crate::table::synth::clustered;
